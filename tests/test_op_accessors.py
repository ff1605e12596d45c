"""Named accessors: operand, result, region and attribute names derived from
each op's row in the op table (`loomcli/ir/ops.py`)."""

from __future__ import annotations

import glob
from collections.abc import Callable
from pathlib import Path

import pytest

from loomcli.frontend import parse_text
from loomcli.ir.core import Operation
from loomcli.ir.ops import OPS

ROOT = Path(__file__).resolve().parent.parent
VALID = sorted(glob.glob(str(ROOT / "tests" / "corpus" / "valid" / "*.loom"))
               + glob.glob(str(ROOT / "samples" / "*.loom")) + glob.glob(str(ROOT / "tests" / "exec" / "*.loom")))


@pytest.mark.parametrize("path", VALID, ids=[Path(p).name for p in VALID])
def test_names_cover_every_operand_result_and_attribute(path: str) -> None:
    """In valid IR the declared names split the operands and results exactly,
    and every attribute the parser stores is one the format declares."""
    for op in parse_text(Path(path).read_text(), path).walk():
        d = op.opdef
        for values, names in ((op.operands, d.operands), (op.results, d.results)):
            if not names:
                continue
            covered: list[int] = []
            for name in names:
                where = d.span(names, name.lstrip("*"), len(values))
                assert where is not None
                covered += list(range(len(values)))[where]
            assert covered == list(range(len(values))), (op.name, names)
        if op.operands and not d.operands:
            assert d.segments, f"{op.name} has operands but declares no names"
        names = {name for name, _ in op.attr_items()}
        assert names <= d.attributes, (op.name, names - d.attributes)
        assert not d.regions or len(d.region_names) == len(d.regions), op.name


def body(text: str) -> list[Operation]:
    module = parse_text(text)
    return list(module.walk())


KERNEL = """kernel.def @k(%n: index) {
  %one = index.constant 1 : index
  %w = index.constant 64 : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%w, %one, %one) : index
} launch(%b: buffer) {
  %zero = index.constant 0 : offset
  %bytes = index.constant 256 : offset
  %s = buffer.alloca<workgroup> align(16) %bytes : buffer
  %v = buffer.view %s[%zero] : buffer -> view<64xf32>
  %c0 = index.constant 0 : index
  %c4 = index.constant 4 : index
  %x = view.load %v[%c0] : view<64xf32> -> f32
  %r = scf.for %i = [%c0 to %c4 step %one2](%acc = %x : f32) -> (f32) {
    %y = view.load %v[%i] : view<64xf32> -> f32
    %a = scalar.addf %acc, %y : f32
    scf.yield %a : f32
  }
  view.store %r, %v[%c4] : f32, view<64xf32>
  kernel.return
}
""".replace("%one2", "%c4")


def test_accessors_read_the_declared_positions() -> None:
    ops = {op.name: op for op in body(KERNEL)}
    kernel, alloca, loop = ops["kernel.def"], ops["buffer.alloca"], ops["scf.for"]
    assert kernel.region("body") is kernel.regions[1] and kernel.region("config") is kernel.regions[0]
    assert alloca.operand("bytes").name == "bytes" and alloca.attr("kind") == "workgroup"
    assert alloca.attr("align") == 16 and alloca.result().name == "s"
    assert [v.name for v in loop.operand_group("inits")] == ["x"]
    assert (loop.operand("lower").name, loop.operand("upper").name, loop.operand("step").name) == ("c0", "c4", "c4")
    assert loop.result_group("results")[0].name == "r" and loop.region("body") is loop.regions[0]
    store = ops["view.store"]
    assert (store.operand("value").name, store.operand("view").name) == ("r", "v")
    assert [v.name for v in store.operand_group("indices")] == ["c4"]
    config = ops["kernel.launch.config"]
    assert [v.name for v in config.operand_group("workgroups")] == ["n", "one", "one"]
    assert [v.name for v in config.operand_group("workgroup_size")] == ["w", "one", "one"]
    assert config.operand_group("cluster_size") == []


@pytest.mark.parametrize("call", [
    lambda op: op.operand("size"),        # buffer.alloca names its operand `bytes`
    lambda op: op.attr("ordering"),       # not an attribute of buffer.alloca
    lambda op: op.region("body"),         # no regions
    lambda op: op.result("total"),
])
def test_undeclared_names_are_key_errors(call: Callable[[Operation], object]) -> None:
    alloca = next(op for op in body(KERNEL) if op.name == "buffer.alloca")
    with pytest.raises(KeyError):
        call(alloca)


def test_attr_default_only_for_declared_attributes() -> None:
    alloca = next(op for op in body(KERNEL) if op.name == "buffer.alloca")
    alloca.drop_attr("align")
    assert alloca.attr("align", 1) == 1
    with pytest.raises(KeyError):
        alloca.attr("align")


def test_variadic_group_between_fixed_names() -> None:
    d = OPS["scf.condition"]
    assert d.span(d.operands, "condition", 3) == slice(0, 1)
    assert d.span(d.operands, "values", 3) == slice(1, 3)
    pack = OPS["buffer.pack"]
    assert pack.span(pack.results, "total", 3) == slice(0, 1) and pack.span(pack.results, "offsets", 3) == slice(1, 3)


def test_single_value_accessors_agree_with_the_declared_spans() -> None:
    """`operand(name)` and `result(name)` read a fixed name's position from a
    table made once per op row; for every row, every fixed name and operand
    counts from one short of the fixed names to a few past them, they answer
    what `span` answers (a KeyError where it finds no single value)."""
    checked = 0
    for d in OPS.values():
        for names, accessor in ((d.operands, "operand"), (d.results, "result")):
            fixed = [n for n in names if not n.startswith("*") and n not in d.segments]
            for count in range(max(0, len(names) - 1), len(names) + 3):
                op = Operation(d, [], [])
                values = op.operands if accessor == "operand" else op.results
                values.extend(f"v{i}" for i in range(count))  # stand-ins: only positions matter
                for name in fixed:
                    group = values[d.span(names, name, count)]
                    if len(group) == 1:
                        assert getattr(op, accessor)(name) == group[0], (d.name, name, count)
                    else:
                        with pytest.raises(KeyError):
                            getattr(op, accessor)(name)
                    checked += 1
    assert checked > 500


def test_op_tables_refuse_names_that_are_not_ops_and_second_entries() -> None:
    from loomcli.ir.ops import OpTable

    table: OpTable[int] = OpTable("test table")
    table.register("scalar.addf", "scalar.subf")(1)
    assert dict(table) == {"scalar.addf": 1, "scalar.subf": 1}
    with pytest.raises(KeyError, match=r"test table: 'vector\.subf' is not a Loom op"):
        table["vector.subf"] = 2
    with pytest.raises(KeyError, match="registered twice"):
        table["scalar.addf"] = 2


def test_only_the_ir_touches_an_ops_attribute_dictionary() -> None:
    """Outside `loomcli/ir` an op is read and written through its accessors
    (`attr`, `attr_or`, `has_attr`, `set_attr`, `drop_attr`, `attr_items`),
    which hold every name to the op's row; the dictionary itself is private."""
    import ast

    package = ROOT / "loomcli"
    touches = [f"{path.relative_to(ROOT)}:{node.lineno}"
               for path in sorted(package.rglob("*.py")) if not path.is_relative_to(package / "ir")
               for node in ast.walk(ast.parse(path.read_text(), str(path)))
               if isinstance(node, ast.Attribute) and node.attr in ("attrs", "_attrs")]
    assert not touches, touches
