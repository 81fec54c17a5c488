"""The command line: exit codes, messages and the check/report/annotate outputs."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shapeinfer.cli import main

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

SIMPLE = '''import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc = nn.Linear(4, width)

    def forward(self, x):
        h = self.fc(x)
        y = torch.relu(h)  # keep this note
        a, b = y.chunk(2, dim=1)
        for i in range(2):
            a = a * 2
        return a + b


__shapeinfer__ = {"model": "Net()", "inputs": {"x": "float32[B, 4]"}}
'''


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def simple(tmp_path):
    p = tmp_path / "simple.py"
    p.write_text(SIMPLE)
    return p


# ---- bad input: clear message, non-zero exit, nothing else breaks -----------------------

def test_missing_file(capsys, tmp_path):
    code, out, err = run(["check", str(tmp_path / "nope.py")], capsys)
    assert code == 2
    assert "nope.py: no such file" in err


def test_syntax_error_names_file_and_line(capsys, tmp_path):
    p = tmp_path / "broken.py"
    p.write_text("import torch\n\ndef f(:\n    pass\n")
    code, out, err = run(["report", str(p)], capsys)
    assert code == 2
    assert f"{p}:3:" in err and "syntax error" in err


def test_a_file_python_cannot_read_names_the_file_without_a_line(capsys, tmp_path):
    p = tmp_path / "binary.py"
    p.write_bytes(b"import torch\n\x00\x01")   # null bytes: a SyntaxError with no line
    code, out, err = run(["report", str(p)], capsys)
    assert code == 2
    assert f"{p}: syntax error: " in err and "None" not in err


def test_unknown_model_name(capsys, simple):
    code, out, err = run(["check", str(simple), "--model", "Nett()", "--input", "x=float32[B,4]"], capsys)
    assert code == 2
    assert "unknown model 'Nett()'" in err


def test_bad_input_spec(capsys, simple):
    code, out, err = run(["check", str(simple), "--model", "Net()", "--input", "x=float32(B,4)"], capsys)
    assert code == 2
    assert "bad input spec" in err and "float32[B, 3, H, W]" in err


def test_input_spec_that_does_not_fit_the_model_is_a_finding(capsys, simple):
    code, out, err = run(["check", str(simple), "--model", "Net()", "--input", "x=float32[B,4,1]",
                          "--sizes", "B=3", "-q"], capsys)
    assert code == 1
    assert "SI131" in out and "input has 1 features but the layer expects 4" in out


def test_bad_sizes(capsys, simple):
    code, out, err = run(["check", str(simple), "--sizes", "B=x"], capsys)
    assert code == 2
    assert "bad --sizes item 'B=x'" in err


def test_model_without_spec(capsys, tmp_path):
    p = tmp_path / "nospec.py"
    p.write_text("import torch\n")
    code, out, err = run(["check", str(p)], capsys)
    assert code == 2
    assert "no model given" in err and "__shapeinfer__" in err


def test_one_bad_file_does_not_stop_the_others(capsys, tmp_path, simple):
    code, out, err = run(["report", str(tmp_path / "missing.py"), str(simple), "-q"], capsys)
    assert code == 2
    assert "missing.py: no such file" in err
    assert "h = self.fc(x)" in out and "float32[B, 8]" in out


# ---- check ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,line,code_,words", [
    ("bug_linear.py", 14, "SI131", ["5408", "5000", "in_features"]),
    ("bug_permute.py", 12, "SI300", ["T == 16"]),
    ("bug_cat.py", 14, "SI115", ["32", "24"]),
])
def test_check_reports_planted_bug_at_its_line(capsys, name, line, code_, words):
    code, out, err = run(["check", str(DATA / name), "-q"], capsys)
    assert code == 1
    first = out.splitlines()[0]
    assert f"{name}:{line}:" in first and code_ in first
    for w in words:
        assert w in out
    assert "^" in out.splitlines()[2]  # the caret line under the source line


def test_check_finds_errors_on_paths_the_sample_does_not_take(capsys):
    # the sample (T=16) takes the else path; the bug is under `if T > 16`
    code, out, _ = run(["check", str(DATA / "bug_unseen_path.py"), "--format", "json", "-q"], capsys)
    errors = [d for d in json.loads(out)["diagnostics"] if d["severity"] == "error"]
    assert code == 1 and len(errors) == 1
    assert errors[0]["line"] == 13 and errors[0]["code"] == "SI111" and errors[0]["when"] == "T > 16"
    assert "16*B != 32*B" in errors[0]["message"]


def test_check_json_and_sarif(capsys):
    code, out, _ = run(["check", str(DATA / "bug_cat.py"), "--format", "json", "-q"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["diagnostics"][0]["code"] == "SI115" and doc["diagnostics"][0]["line"] == 14
    code, out, _ = run(["check", str(DATA / "bug_cat.py"), "--format", "sarif", "-q"], capsys)
    sarif = json.loads(out)
    res = sarif["runs"][0]["results"][0]
    assert sarif["version"] == "2.1.0" and res["ruleId"] == "SI115"
    assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == 14


def test_an_error_in_a_called_function_names_its_call_sites(capsys):
    path = str(DATA / "bug_in_helper.py")
    code, out, _ = run(["check", path, "-q"], capsys)
    assert code == 1
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.endswith("bug_in_helper.py:7:5: SI300 "
                                                           "matmul inner sizes: needs 8 == T, "
                                                           "which fails at the sample sizes"))
    # innermost first: Block.forward's call of attend, then Net.forward's call of block
    assert lines[at + 3].endswith("bug_in_helper.py:16:16") and "called from" in lines[at + 3]
    assert lines[at + 4].endswith("bug_in_helper.py:25:16") and "called from" in lines[at + 4]
    code, out, _ = run(["check", path, "--format", "json", "-q"], capsys)
    (err,) = [d for d in json.loads(out)["diagnostics"] if d["severity"] == "error"]
    assert [(s["line"], s["col"]) for s in err["stack"]] == [(25, 16), (16, 16)]
    code, out, _ = run(["check", path, "--format", "sarif", "-q"], capsys)
    res = json.loads(out)["runs"][0]["results"][0]
    related = [r["physicalLocation"]["region"]["startLine"] for r in res["relatedLocations"]]
    assert related == [16, 25]


@pytest.mark.parametrize("name,dims", [
    ("bug_linear.py", ["5408", "5000"]),  # an error from a shape rule
    ("bug_permute.py", ["T", "16"]),  # a requirement (SI300) that fails at the sample
    ("bug_cat.py", ["32", "24"]),
    ("bug_unseen_path.py", ["16*B", "32*B"]),  # an error on a path the sample does not take
])
def test_check_json_and_sarif_carry_dims(capsys, name, dims):
    """The dims a message names are also data: a 'dims' list in JSON, and in SARIF the
    result's property bag; the message and the other keys are unchanged."""
    code, out, _ = run(["check", str(DATA / name), "--format", "json", "-q"], capsys)
    first = json.loads(out)["diagnostics"][0]
    assert first["dims"] == dims
    assert {"file", "line", "col", "severity", "code", "message"} <= set(first)
    assert all(d in first["message"] for d in dims)
    code, out, _ = run(["check", str(DATA / name), "--format", "sarif", "-q"], capsys)
    res = json.loads(out)["runs"][0]["results"][0]
    assert res["properties"]["dims"] == dims and res["ruleId"] == first["code"]


def test_diagnostic_dims_are_optional_data():
    from shapeinfer.diagnostics import Diagnostic

    assert "dims" not in Diagnostic("SI001", "no shape rule for f", "m.py", 3).to_json()
    given = Diagnostic("SI131", "linear: 7 != 8", "m.py", 3, dims=(7, 8))
    assert given.to_json()["dims"] == ["7", "8"]


def test_check_finds_nothing_in_the_correct_examples(capsys):
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("train_"))
    code, out, err = run(["check", *examples, "--warnings", "-q"], capsys)
    assert code == 0, out
    assert out == "" and "0 error(s), 0 warning(s)" in err


def test_check_clean_file_exits_zero(capsys, simple):
    code, out, err = run(["check", str(simple)], capsys)
    assert code == 0
    assert "0 error(s)" in err


def test_report_json_contract(capsys, simple):
    code, out, _ = run(["report", str(simple), "--format", "json", "--sizes", "B=5"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == 1 and doc["symbols"] == {"B": 5}
    by = {(e["line"], e["name"]): e for e in doc["entries"]}
    assert by[(11, "h")]["type"] == "Tensor" and by[(11, "h")]["shapes"] == [["B", "8"]]
    assert by[(13, "a")]["shapes"] == [["B", "4"]]
    assert by[(14, "i")]["type"] == "int"


# ---- annotate ------------------------------------------------------------------------

def test_annotate_writes_comments_and_keeps_ast(capsys, simple):
    before = simple.read_text()
    code, _, _ = run(["annotate", str(simple), "-q"], capsys)
    after = simple.read_text()
    assert code == 0
    assert ast.dump(ast.parse(before)) == ast.dump(ast.parse(after))
    lines = after.splitlines()
    assert lines[10] == "        h = self.fc(x)  # h: float32[B, 8]"
    assert lines[11] == "        y = torch.relu(h)  # keep this note  # y: float32[B, 8]"
    assert lines[12] == "        a, b = y.chunk(2, dim=1)  # a: float32[B, 4]; b: float32[B, 4]"
    assert lines[13].startswith("        for i in range(2):  # i: int = ")
    # idempotent: a second run changes nothing, and --check agrees
    run(["annotate", str(simple), "-q"], capsys)
    assert simple.read_text() == after
    code, _, _ = run(["annotate", str(simple), "--check", "-q"], capsys)
    assert code == 0


def test_annotate_replaces_stale_comments(capsys, simple):
    run(["annotate", str(simple), "-q"], capsys)
    text = simple.read_text().replace("nn.Linear(4, width)", "nn.Linear(4, 2 * width)")
    simple.write_text(text)
    code, _, err = run(["annotate", str(simple), "--check"], capsys)
    assert code == 1 and "stale" in err
    code, out, _ = run(["annotate", str(simple), "--diff", "-q"], capsys)
    assert "-        h = self.fc(x)  # h: float32[B, 8]" in out
    assert "+        h = self.fc(x)  # h: float32[B, 16]" in out
    run(["annotate", str(simple), "-q"], capsys)
    assert "# h: float32[B, 16]" in simple.read_text()
    assert "float32[B, 8]" not in simple.read_text().split("h = self.fc(x)")[1].splitlines()[0]


def test_annotate_diff_does_not_write(capsys, simple):
    before = simple.read_text()
    code, out, _ = run(["annotate", str(simple), "--diff", "-q"], capsys)
    assert code == 0 and out.startswith("---") and simple.read_text() == before


def test_annotate_no_write_on_failure(capsys, tmp_path):
    p = tmp_path / "broken.py"
    p.write_text("x = (\n")
    before = p.read_bytes()
    code, _, err = run(["annotate", str(p)], capsys)
    assert code == 2 and p.read_bytes() == before
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".shapeinfer-")]


def test_annotate_preserves_crlf_and_mode(capsys, tmp_path):
    p = tmp_path / "crlf.py"
    p.write_bytes(SIMPLE.replace("\n", "\r\n").encode())
    os.chmod(p, 0o640)
    run(["annotate", str(p), "-q"], capsys)
    data = p.read_bytes()
    assert b"# h: float32[B, 8]\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    assert (os.stat(p).st_mode & 0o777) == 0o640


def test_console_script_runs_example():
    """The installed entry point works from a shell, as the README says."""
    exe = shutil.which("shapeinfer")
    cmd = [exe] if exe else [sys.executable, "-m", "shapeinfer.cli"]
    proc = subprocess.run(cmd + ["report", "examples/mnist.py", "-q"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "float32[B, 10]" in proc.stdout
