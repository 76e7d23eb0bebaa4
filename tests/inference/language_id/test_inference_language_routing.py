"""Automatic routing: each utterance goes to the system of the language its language-ID head finds (the adapter, the
fusion for the fusion's target, the encoder alone with a warning for a language without adapter), the top-k
re-ranking by CTC log-likelihood plus the language-ID log-prior, a prepared split evaluated with routing, and the
pipeline's ``target_lang="auto"``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from helpers.lid import LID_LANGUAGES, lid_stage, tone_clip, two_language_corpus
from transformers import AutoProcessor, pipeline

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters.routing import effective_routing
from adaptspeech.data.prepared_data import load_prepared
from adaptspeech.evaluation import evaluate_dataset
from adaptspeech.inference.language_id.identifiers import HeadIdentifier
from adaptspeech.inference.language_id.routing import (
    ADAPTER,
    BASE,
    FUSION,
    ctc_log_likelihoods,
    routed_to,
    transcribe_auto,
)
from adaptspeech.inference.transcriber import transcribe
from adaptspeech.lid_evaluation import evaluate_dataset_auto


@pytest.fixture(scope="module")
def routed_model(tmp_path_factory: pytest.TempPathFactory):
    """``(model folder, prepared folder)``: a trained language-ID head on a tiny wav2vec2 whose two adapters are
    random and far from the identity (so that the language routed to changes the output)."""
    from adaptspeech.training.stage import run_stage

    root = tmp_path_factory.mktemp("routing")
    prepared = two_language_corpus(root / "prepared")
    torch.set_num_threads(1)
    result = run_stage(lid_stage(prepared, root / "run"), progress=False)
    model = AdaptSpeechForCTC.from_pretrained(result.model_dir)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "adapter" in name or "ctc_head" in name:
                parameter.normal_(0.0, 0.5)
    model.save_pretrained(result.model_dir)
    return result.model_dir, prepared


def _load(folder):
    return AdaptSpeechForCTC.from_pretrained(folder).eval(), AutoProcessor.from_pretrained(folder)


def test_each_recording_goes_to_the_adapter_of_its_language(routed_model) -> None:
    model, processor = _load(routed_model[0])
    identifier = HeadIdentifier(model, processor)
    for language in LID_LANGUAGES:
        wave = tone_clip(language, seed=7)
        result = transcribe_auto(model, processor, [wave], identifier)[0]
        assert result.extra["language"] == language and result.extra["language_probability"] > 0.5
        model.set_target_language(language)
        assert result.text == transcribe(model, processor, [wave])[0].text  # the same computation
        model.set_active_languages([])
    texts = {transcribe_auto(model, processor, [tone_clip("ro", 7)], identifier)[0].text}
    with routed_to(model, "cs"):
        texts.add(transcribe(model, processor, [tone_clip("ro", 7)])[0].text)
    assert len(texts) == 2  # the routing changes what is decoded


def test_top_k_keeps_the_best_ctc_log_likelihood_plus_the_lid_log_prior(routed_model) -> None:
    model, processor = _load(routed_model[0])
    result = transcribe_auto(model, processor, [tone_clip("cs", 3)], HeadIdentifier(model, processor), top_k=2,
                             prior_weight=0.5)[0]
    candidates = result.extra["language_candidates"]
    assert [c["language"] for c in candidates] == ["cs", "ro"]  # most probable first
    for c in candidates:
        assert c["score"] == pytest.approx(c["ctc_log_likelihood"] + 0.5 * c["lid_log_prob"], abs=2e-6)
    assert result.extra["language"] == max(candidates, key=lambda c: c["score"])["language"]
    # the CTC score against the model's own CTC loss (mean over the target length: times its length)
    ids = processor.tokenizer("ab").input_ids
    wave = processor.feature_extractor(tone_clip("cs", 3), sampling_rate=16000, return_tensors="pt").input_values
    with routed_to(model, "cs"):
        with torch.no_grad():
            expected = -float(model(input_values=wave, labels=torch.tensor([ids])).loss_ctc) * len(ids)
        got = float(ctc_log_likelihoods(model, {"input_values": wave}, ["ab"], processor.tokenizer)[0])
    assert got == pytest.approx(expected, rel=1e-5)  # the same loss, summed in another order


def test_the_fusion_target_runs_the_fusion_and_a_language_without_adapter_the_bare_encoder(routed_model) -> None:
    model, processor = _load(routed_model[0])
    model.add_fusion(list(LID_LANGUAGES), target_language="cs", activate=False)
    inputs = processor.feature_extractor(tone_clip("cs", 8), sampling_rate=16000, return_tensors="pt").input_values

    def logits():
        with torch.no_grad():
            return model(input_values=inputs).logits

    with routed_to(model, "cs") as system:
        routing, routed = effective_routing(model.routing), logits()
        assert system == FUSION and routing.fusion_active and not model.config.fusion_active
    model.set_fusion_active(True)
    assert torch.equal(routed, logits())  # what the user's setting runs
    model.set_active_languages([])
    with routed_to(model, "ro") as system:
        routing, routed = effective_routing(model.routing), logits()
        assert system == ADAPTER and routing.active_languages == ["ro"] and not routing.fusion_active
    model.set_target_language("ro")
    assert torch.equal(routed, logits())
    model.set_active_languages([])
    with pytest.warns(UserWarning, match="language 'pl' was identified but the model has no adapter for it"), \
            routed_to(model, "pl") as system:
        assert system == BASE and effective_routing(model.routing).active_languages == []
    assert model.config.active_languages == [] and not model.config.fusion_active  # never written


def test_a_recording_too_short_for_the_pooled_statistics_is_skipped_saying_why(routed_model) -> None:
    model, processor = _load(routed_model[0])
    short = tone_clip("ro", 1)[:420]  # two output frames of the tiny front end, one after the pooled layer's mask
    frames = int(model._get_feat_extract_output_lengths(len(short)))
    wave = tone_clip("ro", 1)[: len(short) - (frames - 1) * 10]  # exactly one frame
    assert int(model._get_feat_extract_output_lengths(len(wave))) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = transcribe_auto(model, processor, [wave, tone_clip("ro", 2)], HeadIdentifier(model, processor))
    assert result[0].text == "" and "too short to identify its language (1 frame(s)" in result[0].extra["skipped"]
    assert result[1].extra["language"] == "ro"  # the next recording is transcribed as usual


def test_a_prepared_split_routed_automatically_scores_as_with_the_known_language(routed_model) -> None:
    model, processor = _load(routed_model[0])
    dataset, _ = load_prepared(routed_model[1])
    test = dataset["test"]
    routed = evaluate_dataset_auto(model, test, processor, HeadIdentifier(model, processor), batch_size=4,
                                   progress=False, return_hypotheses=True)
    assert routed["lid"]["accuracy"] == 1.0 and routed["routed_languages"] == list(test["language"])
    assert routed["routing"]["systems"] == {ADAPTER: len(test)}
    for language in LID_LANGUAGES:
        rows = [i for i, lang in enumerate(test["language"]) if lang == language]
        model.set_target_language(language)
        known = evaluate_dataset(model, test.select(rows), processor, batch_size=4, progress=False,
                                 return_hypotheses=True)
        assert known["hypotheses"] == [routed["hypotheses"][i] for i in rows]
        assert routed["per_language"][language]["cer"] == known["overall"]["cer"]
    model.set_active_languages([])
    top2 = evaluate_dataset_auto(model, test, processor, HeadIdentifier(model, processor), batch_size=4, top_k=2,
                                 prior_weight=1e6, progress=False, return_hypotheses=True)
    assert top2["routed_languages"] == routed["routed_languages"]  # a huge prior: the language-ID choice


def test_the_pipeline_routes_each_input_with_target_lang_auto(routed_model) -> None:
    folder = str(routed_model[0])

    def asr_of(target_lang: str):  # a shared vocabulary: the model alone takes target_lang (see test_pipeline_ctc)
        model = AdaptSpeechForCTC.from_pretrained(folder, target_lang=target_lang)
        processor = AutoProcessor.from_pretrained(folder)
        return pipeline("automatic-speech-recognition", model=model, tokenizer=processor.tokenizer,
                        feature_extractor=processor.feature_extractor)

    asr, fixed = asr_of("auto"), {lang: asr_of(lang) for lang in LID_LANGUAGES}
    for language in LID_LANGUAGES:
        wave = tone_clip(language, seed=11)
        out = asr(np.array(wave))
        assert out["language"] == language and 0.5 < out["language_probability"] <= 1.0
        assert out["text"] == fixed[language](np.array(wave))["text"]
    mixed = asr([tone_clip("ro", 12), tone_clip("cs", 12)], batch_size=2)
    assert [o["language"] for o in mixed] == ["ro", "cs"]
    assert [o["text"] for o in mixed] == [fixed[lang](tone_clip(lang, 12))["text"] for lang in LID_LANGUAGES]
    asr.model.add_fusion(list(LID_LANGUAGES), target_language="cs", activate=False)
    with pytest.raises(ValueError, match=r"this batch holds utterances of ro, cs \(ro: adapter, cs: fusion\); only "
                                         "adapters can be routed per utterance in one batch"):
        asr([tone_clip("ro", 12), tone_clip("cs", 12)], batch_size=2)


def test_the_recognition_pass_starts_from_the_language_id_pass_s_front_end(routed_model) -> None:
    model, processor = _load(routed_model[0])
    identifier = HeadIdentifier(model, processor)
    calls: list[int] = []
    handle = model.backbone.feature_extractor.register_forward_hook(lambda *_: calls.append(1))
    try:
        for top_k in (1, 2):  # two candidates decoded and CTC-scored: still one front end
            calls.clear()
            transcribe_auto(model, processor, [tone_clip("ro", 7)], identifier, top_k=top_k)
            assert len(calls) == 1
        calls.clear()
        transcribe_auto(model, processor, [tone_clip("ro", 7)], identifier, lid_seconds=0.2)
        assert len(calls) == 2  # the identifier read a shorter input: the recognition pass computes its own
    finally:
        handle.remove()
    model = AdaptSpeechForCTC.from_pretrained(routed_model[0], target_lang="auto")
    asr = pipeline("automatic-speech-recognition", model=model, tokenizer=processor.tokenizer,
                   feature_extractor=processor.feature_extractor)
    calls.clear()
    handle = model.backbone.feature_extractor.register_forward_hook(lambda *_: calls.append(1))
    asr([tone_clip("ro", 12), tone_clip("cs", 12)], batch_size=2)
    handle.remove()
    assert len(calls) == 1


def test_target_lang_auto_on_a_model_without_a_language_id_head_is_refused(tmp_path) -> None:
    from helpers.model_folders import model_folder

    folder = model_folder(tmp_path, backbone="wav2vec2")
    with pytest.raises(ValueError, match=r"target_lang='auto': .* has no language-ID head; train one"):
        AdaptSpeechForCTC.from_pretrained(folder, target_lang="auto")


# --- routing per call: threads, interleaved streams, errors -----------------------------------------------------------

ROUTING_FIELDS = ("active_languages", "fusion_active")


class _SettingsGuard:
    """Makes ``model.config`` and ``model.routing`` refuse every write of the routing settings (restored on exit): the
    inference paths must route per call, never through the model's settings."""

    def __init__(self, model) -> None:
        self.objects = [model.config, model.routing]

    def __enter__(self) -> _SettingsGuard:
        for obj in self.objects:
            cls = type(obj)

            def refuse(self, name, value, _cls=cls):
                if name in ROUTING_FIELDS:
                    raise AssertionError(f"an inference path wrote {type(self).__name__}.{name} = {value!r}")
                _cls.__setattr__(self, name, value)

            obj.__class__ = type(f"Guarded{cls.__name__}", (cls,), {"__setattr__": refuse})
        return self

    def __exit__(self, *exc) -> None:
        for obj in self.objects:
            obj.__class__ = obj.__class__.__mro__[1]


def _settings(model) -> tuple:
    return (list(model.config.active_languages), model.config.fusion_active, list(model.routing.active_languages),
            model.routing.fusion_active)


def _in_threads(work, count: int = 2) -> list:
    """``work(i)`` in ``count`` threads; returns their results (re-raising the first error)."""
    import threading

    results, errors = [None] * count, []

    def run(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as err:  # handed to the test thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def test_two_threads_routed_to_different_languages_get_exactly_what_each_gets_alone(routed_model) -> None:
    import threading

    model, processor = _load(routed_model[0])
    before = _settings(model)
    inputs = processor.feature_extractor(tone_clip("ro", 5), sampling_rate=16000, return_tensors="pt").input_values
    alone = {}
    for language in LID_LANGUAGES:
        with torch.no_grad(), routed_to(model, language):
            alone[language] = model(input_values=inputs).logits
    assert not torch.equal(alone["ro"], alone["cs"])
    barrier = threading.Barrier(2, timeout=30)

    def work(i: int) -> int:
        language, same = LID_LANGUAGES[i], 0
        for _ in range(30):
            with torch.no_grad(), routed_to(model, language):
                barrier.wait()  # both threads inside their routed blocks at once
                same += torch.equal(model(input_values=inputs).logits, alone[language])
        return same

    assert _in_threads(work) == [30, 30]
    assert _settings(model) == before


def test_automatic_routing_from_two_threads_gives_each_its_own_text(routed_model) -> None:
    import threading

    model, processor = _load(routed_model[0])
    identifier = HeadIdentifier(model, processor)
    before = _settings(model)
    waves = {language: tone_clip(language, 9) for language in LID_LANGUAGES}
    alone = {language: transcribe_auto(model, processor, [wave], identifier)[0].text for language, wave in
             waves.items()}
    known = {}
    for language, wave in waves.items():
        model.set_target_language(language)
        known[language] = transcribe(model, processor, [wave])[0].text
    model.set_active_languages([])
    assert alone == known and alone["ro"] != alone["cs"]
    barrier = threading.Barrier(2, timeout=30)

    def work(i: int) -> list[tuple[str, str]]:
        language, got = LID_LANGUAGES[i], []
        for _ in range(20):
            barrier.wait()
            result = transcribe_auto(model, processor, [waves[language]], identifier)[0]
            got.append((result.extra["language"], result.text))
        return got

    for i, got in enumerate(_in_threads(work)):
        language = LID_LANGUAGES[i]
        assert got == [(language, alone[language])] * 20
    assert _settings(model) == before


def test_a_language_id_pass_in_another_thread_leaves_this_thread_s_forward_alone(routed_model) -> None:
    """While one thread is inside its language-ID pass (held there at the first encoder layer), another runs whole
    routed forwards: they are neither stopped at the pooled layer nor run without adapters."""
    import threading

    model, processor = _load(routed_model[0])
    inputs = processor.feature_extractor(tone_clip("cs", 4), sampling_rate=16000, return_tensors="pt").input_values
    with torch.no_grad(), routed_to(model, "cs"):
        alone = model(input_values=inputs).logits
    lid_alone = model.lid_logits(inputs)
    inside, done = threading.Event(), threading.Event()
    lid_thread: list[threading.Thread] = []

    def hold(module, args) -> None:
        if lid_thread and threading.current_thread() is lid_thread[0] and not inside.is_set():
            inside.set()
            assert done.wait(60)

    layer = model.config.backbone_spec.encoder_layers(model.backbone)[0]
    handle = layer.register_forward_pre_hook(hold)

    def work(i: int):
        if i == 0:
            lid_thread.append(threading.current_thread())
            return model.lid_logits(inputs)
        try:
            assert inside.wait(60)
            with torch.no_grad(), routed_to(model, "cs"):
                return [model(input_values=inputs).logits for _ in range(3)]
        finally:
            done.set()

    try:
        lid, routed = _in_threads(work)
    finally:
        handle.remove()
    assert torch.equal(lid, lid_alone)
    assert all(torch.equal(logits, alone) for logits in routed)


def test_the_pipeline_with_target_lang_auto_from_two_threads(routed_model) -> None:
    import threading

    folder = str(routed_model[0])
    model = AdaptSpeechForCTC.from_pretrained(folder, target_lang="auto")
    processor = AutoProcessor.from_pretrained(folder)
    asr = [pipeline("automatic-speech-recognition", model=model, tokenizer=processor.tokenizer,
                    feature_extractor=processor.feature_extractor) for _ in range(2)]
    waves = {language: tone_clip(language, 13) for language in LID_LANGUAGES}
    alone = {language: asr[0](np.array(wave))["text"] for language, wave in waves.items()}
    barrier = threading.Barrier(2, timeout=30)

    def work(i: int) -> list[tuple[str, str]]:
        language, got = LID_LANGUAGES[i], []
        for _ in range(15):
            barrier.wait()
            out = asr[i](np.array(waves[language]))
            got.append((out["language"], out["text"]))
        return got

    for i, got in enumerate(_in_threads(work)):
        assert got == [(LID_LANGUAGES[i], alone[LID_LANGUAGES[i]])] * 15
    assert model.config.active_languages == [] and not model.config.fusion_active


def test_no_inference_path_writes_the_model_s_routing_settings(routed_model) -> None:
    model, processor = _load(routed_model[0])
    dataset, _ = load_prepared(routed_model[1])
    identifier = HeadIdentifier(model, processor)
    model.add_fusion(list(LID_LANGUAGES), target_language="cs", activate=False)
    wave = tone_clip("ro", 3)
    with _SettingsGuard(model):
        for language in (*LID_LANGUAGES, "pl"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with routed_to(model, language, processor.tokenizer):
                    transcribe(model, processor, [wave])
        transcribe_auto(model, processor, [wave, tone_clip("cs", 3)], identifier, top_k=2)
        evaluate_dataset_auto(model, dataset["test"], processor, identifier, batch_size=4, progress=False)
        with model.without_adapters():
            model.lid_logits(torch.from_numpy(wave)[None])
    assert model.config.active_languages == [] and not model.config.fusion_active


def test_an_error_inside_a_routed_call_leaves_the_model_s_settings_unchanged(routed_model) -> None:
    model, processor = _load(routed_model[0])
    model.set_target_language("ro")
    before = _settings(model)
    inputs = processor.feature_extractor(tone_clip("cs", 6), sampling_rate=16000, return_tensors="pt").input_values
    with torch.no_grad():
        expected = model(input_values=inputs).logits
    with pytest.raises(RuntimeError, match="inside"), routed_to(model, "cs"):
        with torch.no_grad():
            model(input_values=inputs)
        raise RuntimeError("inside the routed block")
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        transcribe_auto(model, processor, [tone_clip("cs", 6)], HeadIdentifier(model, processor), top_k=0)
    assert _settings(model) == before
    with torch.no_grad():
        assert torch.equal(model(input_values=inputs).logits, expected)


def test_inference_modules_hold_no_write_of_the_routing_settings() -> None:
    import re
    from pathlib import Path

    import adaptspeech

    root = Path(adaptspeech.__file__).parent
    files = [*sorted((root / "inference").rglob("*.py")), root / "pipeline.py", root / "lid_evaluation.py"]
    writes = [f"{path.relative_to(root)}:{n}" for path in files
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if re.search(r"\b(active_languages|fusion_active)\s*=[^=]", line)]
    assert writes == []
