"""docs/mms.md's offline example runs as written and prints adaptspeech's logits equal to transformers'."""

import re

import pytest
from helpers.paths import DOCS

DOC = DOCS / "mms.md"


def test_the_offline_example_of_the_mms_page_runs(tmp_path, monkeypatch, capsys):
    text = DOC.read_text()
    match = re.search(r"<!-- offline-example -->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/mms.md lost its offline example"
    monkeypatch.chdir(tmp_path)
    exec(compile(match.group(1), str(DOC), "exec"), {"__name__": "mms_docs_example"})
    printed = capsys.readouterr().out
    found = re.findall(r"max (?:\|adaptspeech - transformers\| =|difference) (\S+)", printed)
    differences = [float(x) for x in found]
    assert len(differences) == 4, printed
    assert max(differences) < 1e-5, printed
    assert "fra (1, 399, 12)" in printed and "deu (1, 399, 9)" in printed


pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
