"""What a check's result may say (feedback from the parent).

- A hidden check's text comes from the parent only: the fixed sentence of its kind of failure, the
  check's own message with every string the ranks sent replaced by [...] (of a value, an error, an
  output or a stack of this check's runs) and every word the grader's code never uses too, and the
  check's declared `feedback=`. Never what student code raised or printed: a rank can raise any
  exception type with any text, a hidden module's source included. Its ranks' output is not shown.
  The values it shows (numbers, quoted names a rank returned) are bounded in kind and number, and the
  text in length, so a submission cannot shape them to carry a hidden module out ("sizes [34, 34, 72, ...]"
  of ord()s): at most MAX_RUN values of one list, MAX_HIDDEN_NUMBERS in all, a number to MAX_DIGITS
  significant digits, a quoted string only name-like, MAX_HIDDEN_LINES lines and MAX_HIDDEN_CHARS characters:
  about 40 bytes a check at most, where a list of ord()s carried 800.
- A public check may show the student's own traceback and output, capped (MAX_LINES, MAX_CHARS).
- No text shown anywhere holds a line of the grader's hidden tests (hidden_*.py of an instructor's
  install): a last net for a verbatim copy; the real defence is that those files are out of reach.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from grader import i18n
from grader.i18n import N_, _

MAX_LINES = 40  # a public message or a rank's output longer than this is cut (and says so)
MAX_CHARS = 4000
MIN_RANK_TEXT = 6  # shorter strings of a rank ("cpu", "gloo") are too common to taint a line of the parent's
MIN_SECRET = 12  # shorter lines of a hidden module ("return out") are not secrets
MAX_RUN = 4  # numbers shown of one list or run of numbers: "[34, 34, 72, 105, …]"
MAX_HIDDEN_NUMBERS = 10  # values (numbers, quoted names) a hidden check's text shows, all its lines together
MAX_DIGITS = 6  # significant digits of one number in a hidden check's text
MAX_HIDDEN_LINES = 12  # a hidden check's own text (the grader's words and the bounded values), before the note
MAX_HIDDEN_CHARS = 1200  # enough for a diagnosis after its context; the values are what is bounded tightly
ELLIPSIS = "…"

HIDDEN_TEXT_NOTE = N_("(what came from your code's run is not shown in hidden tests: [...] above, or left out)")
NOT_SHOWN = "[...]"
HEADINGS = {
    "in your code (most recent call last):",
    "its last output:",
    "stack (most recent call last):",
    "your code (most recent call last):",
    "(none of these frames is in your code)",
}  # of
# what a rank raised, printed or where it waited (grader.engine): nothing to head once that is left out
SECRET_NOTE = N_("[text of the grader's hidden tests, not shown]")
# a keyword argument alone on its line (`world_size=3,` of a decorator laid out by the formatter): no secret, and
# public text ("over world_size=3, rank 2 ...") must not be cut at it
PLUMBING = re.compile(r"^[A-Za-z_]\w*=(-?[\d.]+|True|False|None|\"[^\"]*\"|'[^']*'),?$")
GRADER = Path(__file__).resolve().parent


# --- hidden checks ---------------------------------------------------------------------------------------


def hidden_message(message: str, kind: str, task: str, feedback: str, rank_texts: list[str]) -> str:
    """The text of a failed hidden check. kind: wrong (the check's own verdict), skipped, load_failed (its
    text the parent's from loading the answers), not_defined, not_run, check_bug, or a failed run's kind (grading.failure_kind; its sentence is already
    in `message`, from grading.describe_failure)."""
    if kind == "not_defined":
        return _("`{task}` is not defined in your answers", task=task)
    if kind == "check_bug":
        return _("the hidden check itself failed; please tell the instructor")
    pieces = sorted(_pieces(rank_texts), key=len, reverse=True)
    lines = [line for line in message.splitlines() if line.strip()]
    kept = [_grader_words_only(_without(line, pieces)) for line in lines if not _has_secret(line)]
    kept = [
        line
        for line in kept
        if re.search(r"[^\W\d_]", line.replace(NOT_SHOWN, ""))  # a letter, any script
        and line.strip() not in HEADINGS
        and line.strip() not in {_(heading) for heading in HEADINGS}  # the student's language's (grader.engine)
    ]
    bounded = _bounded_values(kept)
    cut = len(kept) < len(lines) or any(NOT_SHOWN in line for line in kept) or bounded != kept
    kept = bounded
    if not kept:
        kept = [
            _("wrong result in a hidden test of `{task}`", task=task)
            if kind == "wrong"
            else _("a hidden test of `{task}` did not pass", task=task)
        ]
    kept = cap("\n".join(kept), MAX_HIDDEN_LINES, MAX_HIDDEN_CHARS).splitlines()
    if cut:
        kept.append(_(HIDDEN_TEXT_NOTE))
    if feedback:
        kept.append(feedback)
    return cap("\n".join(kept))


# a value a rank may have shaped: a quoted string (a repr), or a number (digits not inside a word: float32 is a word)
# a quote opens only where no letter precedes it: the apostrophe of "the activation's shape" opens nothing
_VALUE = re.compile(r"(?<!\w)'[^'\n]*'(?!\w)|(?<!\w)\"[^\"\n]*\"(?!\w)|(?<![A-Za-z_])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_NAME_LIKE = re.compile(r"[\w .:/=+-]{0,40}")
_SEPARATOR = re.compile(r"[,\s]*")


def _bounded_values(lines: list[str]) -> list[str]:
    """The lines with the values a rank may have shaped bounded in kind and number: each run of values (a list)
    cut after MAX_RUN, at most MAX_HIDDEN_NUMBERS values in all (then …), a number to MAX_DIGITS significant
    digits, a quoted string kept only when name-like (a word, a number, a path), else NOT_SHOWN."""
    budget = MAX_HIDDEN_NUMBERS
    out = []
    for line in lines:
        text, last, run, cut = "", None, 0, False
        for m in _VALUE.finditer(line):
            between = line[0 if last is None else last : m.start()]
            if last is None or not _SEPARATOR.fullmatch(between):
                run, cut = 0, False  # a new run of values
            run += 1
            if run > MAX_RUN or budget <= 0:
                if not cut:
                    text, cut = text + between + ELLIPSIS, True
            else:
                budget -= 1
                text += between + _value(m[0])
            last = m.end()
        out.append(text + line[last or 0 :])
    return out


def _value(token: str) -> str:
    if token[0] in "'\"":
        return token if _NAME_LIKE.fullmatch(token[1:-1]) else NOT_SHOWN
    return token if sum(ch.isdigit() for ch in token) <= MAX_DIGITS else f"{float(token):.{MAX_DIGITS}g}"


def _without(line: str, pieces: list[str]) -> str:
    """The line with every string of the ranks in it replaced by NOT_SHOWN (longest first), except those
    the grader's public code holds itself (a field name, a sample value): they tell nothing new."""
    for piece in pieces:
        if piece in line and piece not in _public_source():
            line = line.replace(piece, NOT_SHOWN)
    return line


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _grader_words_only(line: str) -> str:
    """The line with every word the grader's own code never uses replaced by NOT_SHOWN: text that reached
    the parent another way than a run's result (a torchrun job's output, a file the student's script
    wrote) keeps no word of the student's choosing, so no encoding of anything either."""
    return _WORD.sub(lambda m: m[0] if m[0].lower() in _vocabulary() else NOT_SHOWN, line)


@functools.lru_cache(maxsize=1)
def _vocabulary() -> frozenset[str]:
    text = _public_source() + "".join(path.read_text(errors="replace") for path in _hidden_files())
    text += "".join(i18n.translated_text(lang) for lang in i18n.languages())  # its messages' translations
    return frozenset(word.lower() for word in _WORD.findall(text))


def _pieces(rank_texts: list[str]) -> set[str]:
    """Every string the ranks sent, and each of its lines: none may appear in a hidden check's text."""
    pieces = set()
    for text in rank_texts:
        for piece in [text, *text.splitlines()]:
            piece = piece.strip()
            if len(piece) >= MIN_RANK_TEXT:
                pieces.update((piece, repr(piece)[1:-1]))  # as it is, and as an f-string's !r shows it
    return pieces


# --- public checks ---------------------------------------------------------------------------------------


def public_message(message: str) -> str:
    return cap(redact(message))


def public_output(text: str) -> str:
    """A rank's output as shown under a public check: no hidden test's text, its head and tail when long."""
    return cap(redact(text), head=10)


def cap(text: str, max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS, head: int | None = None) -> str:
    """At most max_lines lines and about max_chars characters: the first lines (or `head` first lines and
    the rest from the end), with a line saying that and how much was cut."""
    lines = text.splitlines()
    if len(lines) <= max_lines and len(text) <= max_chars:
        return text
    n_head = max_lines - 1 if head is None else min(head, max_lines - 1)
    n_tail = max_lines - 1 - n_head if len(lines) > max_lines - 1 else 0
    first = lines[:n_head] if n_tail else lines[: max_lines - 1]
    last = lines[len(lines) - n_tail :] if n_tail else []
    budget = max_chars - 100
    first = _fit(first, budget // 2 if last else budget)
    last = _fit(last[::-1], budget - len("\n".join(first)))[::-1]
    note = _(
        "... (cut: {cut} of {total} lines left out, long lines shortened; at most {max_lines} lines and "
        "{max_chars} characters are shown)",
        cut=len(lines) - len(first) - len(last),
        total=len(lines),
        max_lines=max_lines,
        max_chars=max_chars,
    )
    return "\n".join(first + [note] + last)


def _fit(lines: list[str], budget: int) -> list[str]:
    """The leading lines that fit in budget characters, the last one shortened."""
    out, used = [], 0
    for line in lines:
        room = budget - used
        if room <= 0:
            break
        out.append(line if len(line) <= room else line[:room] + " ...")
        used += len(out[-1]) + 1
    return out


# --- the hidden tests' own text -------------------------------------------------------------------------


def redact(text: str) -> str:
    """text without the grader's hidden modules: from the first line of one found in it to the last, one
    note instead (a copy split over lines or spaced out differently is caught as a whole: then nothing
    of the text is shown)."""
    if not _secrets() or not text:
        return text
    lines = text.splitlines()
    found = [i for i, line in enumerate(lines) if _has_secret(line)]
    if found:
        lines = lines[: found[0]] + [_cut_secret(lines[found[0]])] + lines[found[-1] + 1 :]
    squeezed = _squeeze("".join(lines))
    if any(secret in squeezed for secret in _secrets()):
        return _(SECRET_NOTE)
    return "\n".join(lines)


def _has_secret(line: str) -> bool:
    squeezed = _squeeze(line)
    return len(squeezed) >= MIN_SECRET and any(secret in squeezed for secret in _secrets())


def _cut_secret(line: str) -> str:
    """The line up to where a hidden module's line starts in it, then SECRET_NOTE."""
    kept = [i for i, ch in enumerate(line) if not ch.isspace()]  # squeezed position -> position in line
    squeezed = _squeeze(line)
    start = min(squeezed.find(secret) for secret in _secrets() if secret in squeezed)
    return line[: kept[start]] + _(SECRET_NOTE)


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _hidden_files() -> list[Path]:
    return sorted(GRADER.glob("exercises/*/hidden_*.py"))


@functools.lru_cache(maxsize=1)
def _public_source() -> str:
    """The text of every module of the grader a student build holds too."""
    hidden = _hidden_files()
    return "\n".join(path.read_text(errors="replace") for path in sorted(GRADER.rglob("*.py")) if path not in hidden)


@functools.lru_cache(maxsize=1)
def _secrets() -> frozenset[str]:
    """The lines of the hidden modules present here (none in a student build) that no public module has."""
    public = {_squeeze(line) for line in _public_source().splitlines()}
    return frozenset(
        squeezed
        for path in _hidden_files()
        for line in path.read_text(errors="replace").splitlines()
        if len(squeezed := _squeeze(line)) >= MIN_SECRET and squeezed not in public and not PLUMBING.match(squeezed)
    )
