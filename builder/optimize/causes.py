"""One line for a library's error, its cause kept whole, and the whole text in a log file the line names.

The converter, Keras and TensorFlow wrap their real cause in long texts: the converter puts an MLIR location
(`loc(callsite(fused[...] at ...))`, hundreds of characters) before the op's own message, and Keras puts a
generic "could not be deserialized properly" line and a config dump before "Exception encountered: Could not
locate class ...". `cause` returns the library's own first error line in full (never cut mid-word), with only
the location prefix or the generic wrapper taken off (OpenVINO's "Exception from <file>:<line>:" lines too); `keep_log` writes everything (message, traceback) to a
file so nothing is lost. Pure text functions, plus one writer at the edge.
"""

from __future__ import annotations

import re
import tempfile
import traceback
from pathlib import Path

#: What starts an MLIR diagnostic's message in the converter's text ("<unknown>:0: error: loc(...): ...").
_ERROR = "error: "
#: Keras 3's wrapper around the real deserialization failure.
_KERAS_CAUSE = "Exception encountered: "
#: Where Keras's cause line turns into a config dump (dozens of nested dicts): the sentence before it is the cause.
_KERAS_DUMP = " Full object config:"


def _strip_location(line: str) -> str:
    """`loc(...): message` -> `message` (the parentheses balanced, the location can nest them)."""
    if not line.startswith("loc("):
        return line
    depth = 0
    for i, char in enumerate(line):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                rest = line[i + 1 :].lstrip()
                return rest[1:].lstrip() if rest.startswith(":") else rest
    return line


def converter_cause(text: str) -> str | None:
    """The converter's first `error:` diagnostic, without its location prefix; None when there is none."""
    for line in text.splitlines():
        at = line.find(_ERROR)
        if at >= 0:
            message = _strip_location(line[at + len(_ERROR) :].strip())
            if message:
                return message
    return None


def keras_cause(text: str) -> str | None:
    """Keras 3's "Exception encountered: <cause>" sentence(s), without the config dump after them."""
    at = text.rfind(_KERAS_CAUSE)
    if at < 0:
        return None
    line = text[at + len(_KERAS_CAUSE) :].strip().splitlines()[0] if text[at + len(_KERAS_CAUSE) :].strip() else ""
    return line.split(_KERAS_DUMP, 1)[0].strip() or None


#: OpenVINO (and its C++ checks) put source locations on lines of their own before the reason.
_LOCATION = re.compile(r"^(Exception from \S+:\d+:|Check '.*' failed at \S+:\d+:)$")


#: Terminal colour codes Keras 3 puts around its messages' key sentence.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Keras 3's wrapper line around an error raised inside a layer's or model's call: the reason follows it.
_KERAS_CALL = "Exception encountered when calling "


def first_line(text: str) -> str:
    """The first non-empty line that is not a source location, whole; a line that ends with ':' announces its
    reason on the next line, so that line is joined to it (a note never stops before its reason), and so does
    Keras 3's "Exception encountered when calling X.call()." wrapper, which says where but not why."""
    text = _ANSI.sub("", text)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _LOCATION.match(line.strip())]
    if not lines:
        return ""
    said, rest = lines[0], lines[1:]
    if said.startswith(_KERAS_CALL) and rest:
        said, rest = f"{said} {rest[0]}", rest[1:]
    while said.endswith(":") and rest:
        said, rest = f"{said} {rest[0]}", rest[1:]
    return said


def cause(error: BaseException | str) -> str:
    """The library's own first error line, whole: a converter diagnostic without its location, Keras's inner
    "Exception encountered" sentence, else the first non-empty line (the exception's type name if empty)."""
    text = error if isinstance(error, str) else str(error)
    found = converter_cause(text) or keras_cause(text) or first_line(text)
    if not found and isinstance(error, BaseException):
        return type(error).__name__
    return found


def log_text(error: BaseException | str, context: str = "") -> str:
    """What a log file holds: the context, the whole message, and the traceback when there is one."""
    parts = [context] if context else []
    if isinstance(error, BaseException):
        parts.append(f"{type(error).__name__}: {error}")
        parts.append("".join(traceback.format_exception(type(error), error, error.__traceback__)))
    else:
        parts.append(error)
    return "\n\n".join(parts).rstrip() + "\n"


def keep_log(name: str, text: str, folder: Path | None = None) -> Path:
    """Write `text` to `folder/logs/<name>.log` (a new temp folder when `folder` is None: the case where
    --out must stay untouched); returns the file's path."""
    base = Path(folder) / "logs" if folder is not None else Path(tempfile.mkdtemp(prefix="tfsmith-optimize-logs-"))
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{name}.log"
    path.write_text(text, encoding="utf-8")
    return path


def logged(name: str, error: BaseException, context: str = "") -> str:
    """`<cause> (full text: <temp log>)`: for errors that stop the run before --out is written."""
    path = keep_log(name, log_text(error, context))
    return f"{cause(error)} (full text: {path})"
