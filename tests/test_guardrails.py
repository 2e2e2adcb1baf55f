"""guardrails.yaml: validated on load, a broken file is one line naming the key and the line."""

import pytest

from liger_perf.core.errors import UserError
from liger_perf.judge.guardrails import load_guardrails
from liger_perf.core.workspace import current


def test_the_projects_guardrails_load():
    rules = load_guardrails(current().root / "guardrails.yaml")
    assert rules.target == "backward" and rules.max_regression == 0.05 and rules.correctness == "hard"
    assert load_guardrails(current().root / "guardrails.yaml", target="memory").target == "memory"


@pytest.mark.parametrize("text, expected", [
    ("target: backward\nmax_regresion: 0.05\n", ":2: unknown key 'max_regresion'"),
    ("target: backward\nmax_regression: five percent\n", ":2: max_regression: "),
    ("max_regression: 1.5\n", ":1: max_regression: Input should be less than 1"),
    ("confidence: 1.0\n", ":1: confidence: "),
    ("target: sideways\n", ":1: target: "),
    ("correctness: soft\n", ":1: correctness: "),
    ("max_regression: 0.05\nmax_cumulative_regression: 0.01\n", "max_cumulative_regression must be at least"),
    ("target: [backward\n", "not valid YAML"),
    ("- backward\n", "expected a mapping"),
    # YAML reads yes/on as true, and pydantic true as 1: a one-second trial timeout, without a word
    ("trial_timeout_s: yes\n", ":1: trial_timeout_s: give a number, not true or false"),
    ("max_accuracy_regression: on\n", ":1: max_accuracy_regression: give a number, not true or false"),
    ("max_regression: .nan\n", ":1: max_regression: give a number, not .nan"),
])
def test_broken_guardrails_are_one_line_errors(tmp_path, text, expected):
    path = tmp_path / "guardrails.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as error:
        load_guardrails(path)
    message = str(error.value)
    assert expected in message and "\n" not in message and str(path) in message


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_guardrails(tmp_path / "nope.yaml")
