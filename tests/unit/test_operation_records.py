"""One operation, one module: the adapters (torch, JAX, GPU, arrays, ``ar.ops``, the torch
face, the dispatch and the runtime) read the records and name no operation of their own."""

from __future__ import annotations

import ast
from pathlib import Path

import adaptive_runtime
from adaptive_runtime.kernels import RECORDS

PACKAGE = Path(adaptive_runtime.__file__).parent
# (modules that use operations as a user would, or map another library's names onto them)
USERS = {"cli/demo.py", "torch/_foreign.py"}


def _operation_names() -> set[str]:
    return {r.name for r in RECORDS}


def test_no_module_but_an_operations_own_holds_its_name() -> None:
    names = _operation_names()
    own = {name.split(".")[0] + ".py" for name in names}
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in USERS or (path.parent.name == "kernels" and path.name in own):
            continue
        literals = {node.value for node in ast.walk(ast.parse(path.read_text("utf-8")))
                    if isinstance(node, ast.Constant) and node.value in names}
        if literals:
            found[relative] = sorted(literals)
    assert len(names) >= 10  # (the built-in operations and their backwards)
    assert found == {}, f"operation names outside their own module: {found}"
