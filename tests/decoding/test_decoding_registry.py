"""The decoding registry (adaptspeech.decoding.registry): what each method reads answers which methods a head
supports, what a method needs, whether it takes a beam, reads the CTC output alone or gives the best CTC path."""

from __future__ import annotations

import pytest

from adaptspeech.decoding import DECODING_METHODS, check_decoder, decoders_for, method_names
from adaptspeech.heads import HEAD_OUTPUTS, HEADS, get_head, head_with_outputs


def test_each_head_supports_the_methods_reading_its_outputs_simplest_first() -> None:
    assert decoders_for(get_head("ctc").outputs) == ("ctc_greedy", "ctc_beam")
    assert decoders_for(get_head("las").outputs) == ("attention_greedy", "attention_beam")
    assert decoders_for(get_head("ctc_las").outputs) == method_names()
    assert method_names() == ("ctc_greedy", "ctc_beam", "attention_greedy", "attention_beam", "joint")
    assert sorted(method_names()) == DECODING_METHODS.names()
    for name in HEADS:
        assert get_head(name).default_decoder in decoders_for(get_head(name).outputs)
        assert head_with_outputs(get_head(name).outputs) is get_head(name)


def test_what_each_method_reads_and_takes() -> None:
    methods = {name: DECODING_METHODS.get(name) for name in method_names()}
    assert all(m.reads <= set(HEAD_OUTPUTS) and m.reads for m in methods.values())
    assert [n for n, m in methods.items() if m.ctc_only] == ["ctc_greedy", "ctc_beam"]
    assert [n for n, m in methods.items() if m.best_path] == ["ctc_greedy"]
    assert [n for n, m in methods.items() if m.beam] == ["ctc_beam", "attention_beam", "joint"]
    assert methods["joint"].needs == "a CTC head and an attention (LAS) head"
    assert methods["attention_greedy"].needs == "an attention (LAS) head"


def test_a_method_the_head_cannot_run_is_refused_naming_what_it_needs() -> None:
    with pytest.raises(ValueError, match=r"'joint' needs a CTC head and an attention \(LAS\) head; head 'ctc' "
                                         r"\(CTC only\) supports: ctc_greedy, ctc_beam"):
        check_decoder(get_head("ctc"), "joint")
    check_decoder(get_head("ctc_las"), "joint")
