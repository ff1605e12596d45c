"""Build samples/frontier.loom's command product; compile each kernel request
through a content-keyed cache in front of a task pool as it is published."""

import os
from concurrent.futures import Future

import loomcli as loom

HERE = os.path.dirname(os.path.abspath(__file__))
source = loom.Source.from_path(os.path.join(HERE, "..", "frontier.loom"))
target = loom.Target("amdgpu:gfx1100")
cache: dict[str, Future] = {}

with loom.TaskPool(max_workers=4) as pool:
    def publish(request: loom.Request) -> None:
        # The key never includes the parent binding: one compile per distinct request.
        if request.key not in cache:
            cache[request.key] = pool.submit_compile(request, target=target, outputs=("amdgpu-hsaco",))

    product = loom.build_command_product(source, target=target, request_sink=publish)
    if not product.ok:
        raise SystemExit("\n".join(map(str, product.diagnostics)))
    compiled = [f.result() for f in cache.values()]
    assert all(r.ok for r in compiled), [d for r in compiled for d in r.diagnostics]
    print(product.summary(0))
