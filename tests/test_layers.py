"""The package's layering: data flows reader (codec) → kernels → data, nn → models, transforms →
train → cli, and no module imports a layer above its own; within a layer, data and nn stand apart,
and so do models and transforms. Every import statement in dctnet/ is checked — top-level or inside
a function, ``import a.b``, ``from a import b`` (``b`` a submodule of any package, or a name) — and
the modules import one another in no circle."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

#: lowest first; a module may import its own layer and those before it
LAYERS = [
    # the reader: libjpeg, the files and what they hold, the process's placement and memory
    # (and dctnet.coerce: values checked against annotations, for recipes and ops' arguments)
    ("dctnet._jpeg", "dctnet.codec", "dctnet.coerce", "dctnet.distributed", "dctnet.hostmem", "dctnet.quality",
     "dctnet.readback", "dctnet.synthetic"),
    # pure batched tensor maths: DCT and colour, pixel ops, geometry, whole images, libjpeg's integer
    # decode, resizing
    ("dctnet.kernels", "dctnet.exact", "dctnet.image", "dctnet.resize"),
    # the CPU side (datasets, loaders, the batch contract they produce) and the layers
    ("dctnet.batch", "dctnet.data", "dctnet.nn"),
    # models built from the layers; the device-side transforms
    ("dctnet.models", "dctnet.transforms"),
    ("dctnet.train",),
    ("dctnet.cli", "dctnet.__main__"),
]

#: packages of one layer that import nothing of each other
APART = [("dctnet.data", "dctnet.nn"), ("dctnet.models", "dctnet.transforms")]


def layer_of(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str, root: Path = ROOT) -> bool:
    """Whether ``name`` (dotted) is a module or package under ``root``: a ``.py`` file, a folder, or
    a compiled extension (``dctnet._jpeg``)."""
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or path.is_dir() or any(path.parent.glob(path.name + ".*.so"))


def imports_of(path: Path, name: str, root: Path = ROOT) -> list[tuple[int, str]]:
    """``(line, module)`` for every dctnet module ``path`` (module ``name``) imports, at any depth of
    its code: ``import a.b`` is ``a.b``; ``from a import b`` is ``a.b`` when that is a submodule (of
    any package), else ``a``; relative imports resolved against the package."""
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
            subs = [f"{mod}.{a.name}" for a in node.names if is_module(f"{mod}.{a.name}", root)]
            found += [(node.lineno, s) for s in subs]
            if len(subs) < len(node.names):  # names defined by the module (or package) itself
                found.append((node.lineno, mod))
    return [(line, m) for line, m in found if within(m, "dctnet")]


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module → the dctnet modules it imports, at module level or inside functions. A name that is a
    package stands for its ``__init__``; ``dctnet.x.Name`` for ``dctnet.x``. Importing ``a.b.c``
    also runs the ``__init__`` of each package on the way (``a.b``): an edge to it too, unless the
    importer lies in that package (its ``__init__`` is running or has run)."""
    files = sorted((root / "dctnet").rglob("*.py"))
    names = {module_name(p, root) for p in files}
    compiled = {module_name(p.with_name(p.name.split(".")[0] + ".py"), root) for p in (root / "dctnet").rglob("*.so")}
    names |= compiled
    out: dict[str, set[str]] = {c: set() for c in compiled}
    for path in files:
        name = module_name(path, root)
        targets = set()
        for _, target in imports_of(path, name, root):
            while target not in names and "." in target:  # dctnet.x.y.Name → the module that defines it
                target = target.rsplit(".", 1)[0]
            if target != name:
                targets.add(target)
            parts = target.split(".")
            targets |= {t for t in (".".join(parts[:k]) for k in range(2, len(parts)))
                        if t in names and not within(name, t)}
        out[name] = targets
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: every strongly connected set of two or more modules (Tarjan), sorted. A
    package's ``__init__`` importing its submodules is no circle by itself; a submodule importing its
    own package's ``__init__`` back makes one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def edges(v: str) -> list[str]:
        return sorted(g[v])

    def visit(v: str) -> None:  # iterative: no recursion limit for deep chains
        work = [(v, iter(edges(v)))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges(nxt))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_module_imports_a_layer_above_its_own():
    files = sorted((ROOT / "dctnet").rglob("*.py"))
    assert len(files) > 30
    upward, unplaced, across = [], [], []
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
            where = f"{path.relative_to(ROOT)}:{line} ({name}, layer {own}) imports {target}"
            if other is None:
                unplaced.append(target)
            elif other > own:
                upward.append(f"{where} (layer {other})")
            if any(within(name, a) and within(target, b) or within(name, b) and within(target, a) for a, b in APART):
                across.append(where)
    assert not unplaced, f"modules in no layer: {sorted(set(unplaced))}"
    assert not upward, "upward imports:\n" + "\n".join(upward)
    assert not across, "imports between packages that stand apart:\n" + "\n".join(across)
    top = [m for _, m in imports_of(ROOT / "dctnet" / "__init__.py", "dctnet")]
    assert all(layer_of(m) == 0 for m in top if m != "dctnet"), top


def test_data_nn_models_use_no_transforms():
    """The leaf maths (normalisation, DCT kernels) data, nn and models use lives in the kernels layer."""
    g = graph()
    bad = {m: sorted(t for t in ts if within(t, "dctnet.transforms")) for m, ts in g.items()
           if any(within(m, p) for p in ("dctnet.data", "dctnet.nn", "dctnet.models"))}
    assert not {m: ts for m, ts in bad.items() if ts}


def test_no_import_circle_among_the_modules():
    """0 circles, counting imports inside functions and ``from package import submodule`` of every
    package (function-level imports once hid two: transforms.choice ↔ registry, data.shards ↔ hf)."""
    found = cycles(graph())
    assert not found, f"{len(found)} import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_import_graph_sees_what_it_must(tmp_path):
    """The graph itself: function-level imports, ``from pkg import sub`` for a nested package, a
    package's ``__init__`` run on the way, and a circle through them all are found."""
    pkg = tmp_path / "dctnet"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("from dctnet.a.one import f\n")
    (pkg / "a" / "one.py").write_text("def f():\n    from dctnet.b import two  # inside a function\n")
    (pkg / "b" / "__init__.py").write_text("")
    (pkg / "b" / "two.py").write_text("from dctnet.a import one\n")
    (pkg / "b" / "three.py").write_text("import dctnet.b\n")
    g = graph(tmp_path)
    assert g["dctnet.a.one"] == {"dctnet.b", "dctnet.b.two"}
    assert g["dctnet.b.two"] == {"dctnet.a", "dctnet.a.one"}
    assert g["dctnet.b.three"] == {"dctnet.b"}  # its own package, named: an edge
    assert g["dctnet.a"] == {"dctnet.a.one"}
    assert cycles(g) == [["dctnet.a", "dctnet.a.one", "dctnet.b.two"]]
    (pkg / "b" / "__init__.py").write_text("from dctnet.b.three import *\n")  # and back: a circle
    assert ["dctnet.b", "dctnet.b.three"] in cycles(graph(tmp_path))


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
