"""The package's layering: data flows codec → functional → transforms → nn → models → data →
train → cli, and no module imports a layer above its own (every import statement in dctnet/,
top-level or inside a function, is checked)."""

from __future__ import annotations

import ast

from conftest import ROOT

#: lowest first; a module may import its own layer and those before it
LAYERS = [
    ("dctnet._jpeg", "dctnet.codec", "dctnet.distributed", "dctnet.hostmem", "dctnet.quality", "dctnet.readback",
     "dctnet.synthetic"),
    ("dctnet.functional", "dctnet.exact", "dctnet.image", "dctnet.resize"),
    ("dctnet.batch",),
    ("dctnet.transforms",),
    ("dctnet.nn",),
    ("dctnet.models",),
    ("dctnet.data",),
    ("dctnet.train",),
    ("dctnet.cli", "dctnet.__main__"),
]


def layer_of(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def module_name(path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path, name: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            # ``from dctnet import data`` names a submodule
            if mod == "dctnet":
                found += [(node.lineno, f"dctnet.{a.name}") for a in node.names
                          if (ROOT / "dctnet" / f"{a.name}.py").exists() or (ROOT / "dctnet" / a.name).is_dir()]
    return [(line, m) for line, m in found if m.startswith("dctnet")]


def test_no_module_imports_a_layer_above_its_own():
    files = sorted((ROOT / "dctnet").rglob("*.py"))
    assert len(files) > 30
    upward, unplaced = [], []
    for path in files:
        name = module_name(path)
        own = layer_of(name)
        if name == "dctnet":
            continue  # the package itself re-exports the reader only (checked below)
        if own is None:
            unplaced.append(name)
            continue
        for line, target in imports_of(path, name):
            if target == "dctnet":
                continue
            other = layer_of(target)
            if other is None:
                unplaced.append(target)
            elif other > own:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({name}, layer {own}) imports {target} (layer {other})")
    assert not unplaced, f"modules in no layer: {sorted(set(unplaced))}"
    assert not upward, "upward imports:\n" + "\n".join(upward)
    top = [m for _, m in imports_of(ROOT / "dctnet" / "__init__.py", "dctnet")]
    assert all(layer_of(m) == 0 for m in top if m != "dctnet"), top


def _graph() -> dict[str, set[str]]:
    """Module → the dctnet modules it imports, at module level or inside functions. A name that
    is a package stands for its ``__init__``; ``from pkg import sub`` for ``pkg.sub``."""
    files = sorted((ROOT / "dctnet").rglob("*.py"))
    names = {module_name(p) for p in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        name = module_name(path)
        targets = set()
        for _, target in imports_of(path, name):
            while target not in names and "." in target:  # dctnet.x.y.Name → the module that defines it
                target = target.rsplit(".", 1)[0]
            if target in names and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def test_no_import_circle_among_the_modules():
    """Counting imports inside functions too (a function-level import hid two circles). A
    package's ``__init__`` re-exporting its submodules is not a circle; a submodule importing its
    own package's ``__init__`` would be."""
    graph = _graph()
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + "."):  # a package's __init__ importing its own submodule
                continue
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_imports_inside_functions_say_why():
    """An import inside a function defers an optional or slow library, or hides a circle; the
    first is allowed when a comment on the line (or the line above) says so, the second not at all."""
    bare = []
    for path in sorted((ROOT / "dctnet").rglob("*.py")):
        lines = path.read_text().split("\n")
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    here, above = lines[sub.lineno - 1], lines[sub.lineno - 2].strip()
                    if "#" not in here and not above.startswith("#"):
                        bare.append(f"{path.relative_to(ROOT)}:{sub.lineno}: {here.strip()}")
    assert not bare, "function-level imports without a reason:\n" + "\n".join(sorted(set(bare)))
