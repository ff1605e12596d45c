"""Running check cases: host semantics (`cases`), kernel launches through the
device ABI (`launch`) and the Vulkan compute runner (`vulkan`). Nothing here
is imported until `loom test` runs."""
