"""Torch is the oracle: for every model declared in examples/*.py, the analyzer's
shapes, evaluated at concrete sizes, must equal the shapes torch really produces
at every binding of a name in the example's own file, at the sample sizes and at
each of the declared ``oracle_sizes``."""

import ast
import os
import runpy
import sys
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import shapeinfer  # noqa: E402
from oracle import Report, compare, record_shapes  # noqa: E402
from shapeinfer.spec import SPEC_NAME, default_sizes, load_targets, parse_input_spec  # noqa: E402

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
MIN_ORACLE_SIZES = 3


def declared(path: Path) -> list[dict]:
    """The file's ``__shapeinfer__`` declarations, read without importing the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == SPEC_NAME for t in node.targets):
            value = ast.literal_eval(node.value)
            return list(value) if isinstance(value, (list, tuple)) else [value]
    return []


def _case_id(path: Path, decl: dict) -> str:
    model = str(decl.get("model", "?")).split("(")[0].strip()
    return f"{path.stem}-{model}"


CASES = [pytest.param(path, i, id=_case_id(path, d))
         for path in EXAMPLES for i, d in enumerate(declared(path))]


def test_examples_exist():
    assert len(EXAMPLES) >= 11, [p.name for p in EXAMPLES]
    assert len(CASES) >= 13


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_declares_varying_oracle_sizes(path):
    decls = declared(path)
    assert decls, f"{path.name}: no {SPEC_NAME} declaration"
    for d in decls:
        symbols = []
        for name, text in d["inputs"].items():
            for dim in parse_input_spec(name, text).dims:
                if isinstance(dim, str) and dim not in symbols:
                    symbols.append(dim)
        oracle = d.get("oracle_sizes", [])
        assert len(oracle) >= MIN_ORACLE_SIZES, f"{d['model']}: only {len(oracle)} oracle size sets"
        size_sets = [default_sizes(symbols, d.get("sizes"))] + [
            default_sizes(symbols, {**d.get("sizes", {}), **s}) for s in oracle]
        for s in oracle:
            assert set(s) <= set(symbols), f"{d['model']}: unknown symbols in {s}"
        for sym in symbols:
            values = {s[sym] for s in size_sets}
            assert len(values) >= 3, f"{d['model']}: {sym} takes only the values {sorted(values)}"
        for i, a in enumerate(symbols):
            for b in symbols[i + 1:]:
                assert any(s[a] != s[b] for s in size_sets), \
                    f"{d['model']}: {a} == {b} in every size set: a swapped dim would pass"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_main_block_runs(path, capsys):
    torch.manual_seed(0)
    runpy.run_path(str(path), run_name="__main__")
    assert "output" in capsys.readouterr().out


def _sizes_to_check(target) -> list[dict]:
    sets = [target.sizes] + target.oracle_sizes
    return [default_sizes(target.symbols, {**target.sizes, **s}) for s in sets]


def _record(target, path, sizes, seed):
    args, kwargs = target.make_args(sizes, seed=seed)
    with torch.no_grad():
        return record_shapes(target.model, [path], *args, **kwargs)


@pytest.mark.parametrize("path,index", CASES)
def test_oracle_records_the_example(path, index):
    """The recorder itself sees the example's code (independent of the analyzer)."""
    target = load_targets(path)[index]
    recorded = _record(target, path, target.sizes, seed=0)
    assert recorded, f"{path.name}: nothing recorded"
    assert {f for f, _, _ in recorded} == {os.path.realpath(path)}


@pytest.mark.parametrize("path,index", CASES)
def test_analysis_matches_torch(path, index):
    analyze = getattr(shapeinfer, "analyze", None)
    if analyze is None:
        pytest.skip("shapeinfer.analyze does not exist yet")
    target = load_targets(path)[index]
    args, kwargs = target.make_args(target.sizes, seed=0)
    analysis = analyze(target.model, args=args, kwargs=kwargs, dims=target.dims).to_json()

    size_sets = _sizes_to_check(target)
    assert len(size_sets) >= 1 + MIN_ORACLE_SIZES
    report = Report(title=f"{path.name} {target.name}")
    for seed, sizes in enumerate(size_sets):
        recorded = _record(target, path, sizes, seed)
        assert recorded, f"{path.name}: nothing recorded at {sizes}"
        report = report + compare(analysis, recorded, sizes, [path])
    if not report.ok:
        pytest.fail(report.format(), pytrace=False)
