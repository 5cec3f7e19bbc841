"""The grader speaks the student's language (grader/i18n.py).

- every grader catalog compiles, is complete, is in step with the source, and keeps each message's
  placeholders and inline code;
- COURSE_LANG=es: the framing of a check's output, exercise 2's mistake message from a real failing
  check (one launch), the hardware-plan line and a Quick Check verdict with its explanation are Spanish;
- the language comes from COURSE_LANG, else the locale (LANG=nl_NL.UTF-8 gives Dutch), else English,
  and an unknown language is English;
- English output is byte for byte what it was (golden strings below; the other tests assert English
  messages too).
"""

from __future__ import annotations

import re

import pytest
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from grader import feedback_filter, i18n
from grader.checks import CheckResult
from grader.i18n import _
from grader.notebook.display import CheckView
from grader.translate import LANGUAGES, grader_catalog
from tests.helpers import failed, grade_source, mutate, solution_source

PLACEHOLDER = re.compile(r"(?<!\{)\{[^{}\s]*\}(?!\})")  # {name}, {name!r}, {points:g}; not {{ }} nor {...}
CODE = re.compile(r"`[^`]+`")


@pytest.fixture
def lang(monkeypatch):
    """Choose the language the way a student's environment does; nothing else set."""
    for name in i18n.LANGUAGE_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def choose(**env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    return choose


# --- the catalogs ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def catalogs():
    out = {}
    for code in LANGUAGES:
        with open(i18n.po_path(code), "rb") as f:
            out[code] = read_po(f, locale=code, domain=i18n.DOMAIN)
    return out


@pytest.mark.parametrize("code", LANGUAGES)
def test_catalog_compiles_and_every_entry_is_translated(catalogs, code):
    catalog = catalogs[code]
    errors = [(message.id, problems) for message, problems in catalog.check()]
    assert not errors, errors  # Babel's msgfmt --check: plural forms, python-format
    write_mo(__import__("io").BytesIO(), catalog)
    messages = [m for m in catalog if m.id]
    untranslated = [
        m.id for m in messages if m.fuzzy or not all(m.string if isinstance(m.string, tuple) else [m.string])
    ]
    assert not untranslated, f"{code}: {len(untranslated)} entries untranslated or fuzzy: {untranslated[:3]}"


def test_catalogs_follow_the_source(catalogs):
    """A message added or changed in grader/ without `python -m grader translate` fails here."""
    source = {m.id if isinstance(m.id, str) else m.id[0] for m in grader_catalog.template() if m.id}
    assert len(source) > 200  # the framing, exercise 2's messages and hints, the Quick Checks
    for code, catalog in catalogs.items():
        ids = {m.id if isinstance(m.id, str) else m.id[0] for m in catalog if m.id}
        assert ids == source, f"{code}: run `python -m grader translate` ({sorted(ids ^ source)[:3]})"


@pytest.mark.parametrize("code", LANGUAGES)
def test_translations_keep_placeholders_and_inline_code(catalogs, code):
    for message in catalogs[code]:
        if not message.id:
            continue
        english = message.id if isinstance(message.id, tuple) else (message.id,)
        translated = message.string if isinstance(message.string, tuple) else (message.string,)
        want_names = sorted(set(PLACEHOLDER.findall(english[-1])) | set(PLACEHOLDER.findall(english[0])))
        for text in translated:
            names = set(PLACEHOLDER.findall(text))
            assert names <= set(want_names), (code, message.id, text)
            assert names >= set(want_names) - {"{n}"}, (code, message.id, text)  # a one-form plural may drop n
            assert sorted(CODE.findall(text)) == sorted(CODE.findall(english[0])), (code, message.id, text)
            assert text.count("{{") == english[0].count("{{"), (code, message.id, text)


# --- choosing the language -------------------------------------------------------------------------


def test_course_lang_wins_then_the_locale_then_english(lang):
    assert i18n.language() == "en" and _("unanswered") == "unanswered"
    lang(LANG="nl_NL.UTF-8")
    assert i18n.language() == "nl" and _("unanswered") == "onbeantwoord"
    lang(LC_ALL="ja_JP.UTF-8")
    assert i18n.language() == "ja"
    lang(COURSE_LANG="es")
    assert i18n.language() == "es" and _("unanswered") == "sin responder"


@pytest.mark.parametrize("value", ["xx", "fr_FR.UTF-8", "C", "POSIX", "en_US.UTF-8"])
def test_a_language_without_a_catalog_is_english(lang, value):
    lang(COURSE_LANG=value, LANG="es_ES.UTF-8")  # COURSE_LANG decides, even when it has no catalog
    assert i18n.language() == "en"
    assert _("`{task}` is not defined in your answers", task="setup") == "`setup` is not defined in your answers"


def test_a_broken_translation_shows_the_english(lang, monkeypatch):
    """A catalog that names a placeholder the code does not give must not hide the message."""
    lang(COURSE_LANG="es")
    table = i18n.translations("es")._catalog
    monkeypatch.setitem(table, "rank {rank}", "rank {rango}")
    assert _("rank {rank}", rank=1) == "rank 1"


# --- what a student sees ---------------------------------------------------------------------------


def _result(**kw) -> CheckResult:
    base = dict(
        name="setup_joins",
        task="setup",
        passed=False,
        points=0,
        max_points=1,
        message="",
        plan="2 ranks, gloo on CPU (no GPU visible)",
        outputs=[["hello\n", ""]],
    )
    return CheckResult(**{**base, **kw})


ENGLISH_VIEW = """✗ setup: setup_joins (0/1)
    `setup` is not defined in your answers
    rank 0 printed:
      | hello
    (ran on: 2 ranks, gloo on CPU (no GPU visible))"""


def _view(plan: str) -> str:
    view = CheckView("setup", expected=1, rich=False)
    view.results.append(_result(message=_("`{task}` is not defined in your answers", task="setup"), plan=plan))
    view.done = True
    return repr(view)


def test_english_framing_is_unchanged(lang):
    from grader.engine.plan import plan_for

    assert _view(plan_for(2, 0).describe()) == ENGLISH_VIEW
    assert plan_for(2, 1).describe() == (
        "2 ranks, gloo on CPU (1 GPU visible: nccl needs one GPU per rank; the GPUs are hidden from the ranks)"
    )
    assert plan_for(1, 2).describe() == "1 rank, nccl, rank r on cuda:r (2 GPUs visible)"


def test_spanish_framing_plan_and_hidden_text(lang):
    from grader.engine.plan import plan_for
    from grader.grading import hang_heading
    from grader.engine import RunResult

    lang(COURSE_LANG="es")
    shown = _view(plan_for(2, 0).describe())
    assert shown == (
        "✗ setup: setup_joins (0/1)\n    `setup` no está definida en tus respuestas\n"
        "    rank 0 imprimió:\n      | hello\n"
        "    (se ejecutó en: 2 ranks, gloo en CPU (ninguna GPU visible))"
    )
    html = CheckView("setup", expected=2, rich=False)._repr_html_()
    assert "comprobando setup: 0 de 2 checks hechos" in html
    assert hang_heading(RunResult(ranks=[], plan=plan_for(2, 0), seconds=0.0)).startswith(
        "la ejecución no terminó a tiempo (un deadlock"
    )
    # a hidden check's text keeps the grader's own words in Spanish (feedback_filter's vocabulary has them)
    message = _("the samples come in dataset order: the DistributedSampler must shuffle (shuffle=True)")
    assert feedback_filter.hidden_message(message, "wrong", "make_dataloader", "", []) == message
    assert (
        feedback_filter.hidden_message("x", "not_defined", "setup", "", [])
        == "`setup` no está definida en tus respuestas"
    )


def test_spanish_quick_check_verdict_and_explanation(lang, capsys):
    from grader.lessons import quiz

    lang(COURSE_LANG="es")
    quiz.check("02_ddp_basics", {"q1": "z"})
    out = capsys.readouterr().out
    assert "q1  ✗ z: DDP hace all-reduce (suma) de los gradientes dentro de backward()" in out
    assert "q2  sin responder" in out and out.rstrip().endswith(f"0/{len(quiz.QUIZZES['02_ddp_basics'])} correctas")


def test_spanish_hints_and_progress_view(lang, monkeypatch, tmp_path, capsys):
    from grader.notebook.hints import hinter
    from grader.progress.grade import AssignmentProgress, TaskProgress
    from grader.progress.view import text_report

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # the hint count goes here, not to the user's state
    lang(COURSE_LANG="es")
    hinter("02_ddp_basics")("pick_backend")
    out = capsys.readouterr().out
    assert out.startswith("**Pista 1 de 2** para `pick_backend`:\n\nEl backend depende de una pregunta")
    assert out.rstrip().endswith('*`hint("pick_backend")` otra vez muestra la siguiente.*')
    row = AssignmentProgress(
        "02_ddp_basics",
        str(tmp_path / "a.ipynb"),
        [TaskProgress("setup", "fail", 1, 2, 1, 2, hints=2), TaskProgress("cleanup", "todo")],
    )
    report = text_report([row], str(tmp_path))
    assert report.splitlines()[0].startswith("Tu progreso: los checks visibles")
    assert "0/2 tareas  1/2 puntos  a.ipynb" in report and "✗ setup (2 pistas)" in report
    assert report.splitlines()[-1].startswith("✓ pasa   ✗ falla")


def test_spanish_mistake_message_of_exercise_2_from_a_real_check(lang):
    """One launch: pick_backend always answering nccl fails backend_matches_hardware, in Spanish."""
    from grader.engine.plan import current_plan

    lang(COURSE_LANG="es")
    source = mutate(
        solution_source("02_ddp_basics"), 'return "nccl" if torch.cuda.is_available() else "gloo"', 'return "nccl"'
    )
    report = grade_source("02_ddp_basics", source, checks=["backend_matches_hardware"])
    message = failed(report)["backend_matches_hardware"]
    assert "pick_backend() devolvió 'nccl'" in message and "se esperaba 'gloo'" in message, message
    assert report.checks[0].plan == current_plan(2).describe() and " en " in report.checks[0].plan


def test_a_rank_speaks_the_callers_language_not_the_one_its_forkserver_started_with(lang, monkeypatch):
    """The warm forkserver outlives a change of COURSE_LANG (a kernel, a test worker): each run passes the caller's
    language variables to its ranks, so a message made in a rank follows the caller now."""
    source = mutate(solution_source("02_ddp_basics"), "    return DDP(model)\n", "    return model\n")
    lang(COURSE_LANG="es")
    spanish = failed(grade_source("02_ddp_basics", source, task="wrap_model"))["wrap_model_broadcasts_rank0_parameters"]
    monkeypatch.delenv("COURSE_LANG")  # nothing set now: English
    english = failed(grade_source("02_ddp_basics", source, task="wrap_model"))["wrap_model_broadcasts_rank0_parameters"]
    assert "no un DistributedDataParallel" in spanish, spanish
    assert "not a DistributedDataParallel" in english, english


def test_a_changed_english_message_turns_fuzzy_and_shows_in_english(lang, monkeypatch, tmp_path):
    """As for the lessons: `python -m grader translate` keeps the old translation marked fuzzy; until a
    translator checks it the student sees the new English."""
    import shutil

    from babel.messages.catalog import Catalog

    shutil.copytree(i18n.LOCALE_DIR, tmp_path / "locale")
    monkeypatch.setattr(i18n, "LOCALE_DIR", str(tmp_path / "locale"))
    old = "the samples come in dataset order: the DistributedSampler must shuffle (shuffle=True)"
    new = "the samples come in dataset order: the DistributedSampler must shuffle them (shuffle=True)"
    source = grader_catalog.template()
    changed = Catalog(project=source.project, fuzzy=False)
    for message in source:
        if message.id:
            changed.add(new if message.id == old else message.id, locations=message.locations)
    assert grader_catalog.update("es", changed)
    entry = grader_catalog.read("es").get(new)
    assert entry.fuzzy and entry.string.startswith("las muestras llegan")
    text = (tmp_path / "locale" / "es" / "LC_MESSAGES" / "grader.po").read_text(encoding="utf-8")
    assert '#| msgid "the samples come in dataset order: the DistributedSampler must shuffle (shuffle=True)"' in text
    lang(COURSE_LANG="es")
    assert _(new) == new and _("unanswered") == "sin responder"


def test_sandboxed_grading_passes_the_course_language_on_and_nothing_else(monkeypatch):
    """make grade's feedback is written inside the sandbox (or nursery job), whose environment is built from
    scratch: COURSE_LANG reaches it when it names a language, never an arbitrary value."""
    from grader.isolation import sandbox_env

    monkeypatch.setenv("COURSE_LANG", "es")
    assert sandbox_env.environment(masked=True)["COURSE_LANG"] == "es"
    for bad in ("../../etc", "es\nNBGRADER_DB_URL=x", "x" * 40):
        monkeypatch.setenv("COURSE_LANG", bad)
        assert "COURSE_LANG" not in sandbox_env.environment(masked=False)
    monkeypatch.delenv("COURSE_LANG")
    assert "COURSE_LANG" not in sandbox_env.environment(masked=False)
