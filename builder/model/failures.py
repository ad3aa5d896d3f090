"""A model that cannot compute an answer for what a request carried, said in the runtime's own words.

A token id beyond the vocabulary, a waveform shorter than one STFT frame, a length a convolution cannot take:
the model itself refuses these inputs while it runs (TensorFlow raises `InvalidArgumentError`, LiteRT a
`RuntimeError` naming the kernel that failed), after the server has checked everything a signature says. They
are the client's to fix, so every protocol answers them as TF Serving does (HTTP 400, gRPC INVALID_ARGUMENT),
never as the server's own fault (500 and a traceback in the log). Each backend turns such a failure into
`ModelInputError`; the server's one error renderer maps it to 400.

The runtimes' texts need cleaning before a client reads them: TensorFlow wraps the kernel's sentence in
"Graph execution error", a "Detected at node ... defined at" stack and `[[{{node ...}}]] [Op:...]` markers;
LiteRT runs its reporter's messages together ("gather index out of boundsNode number 3 (GATHER) failed to
invoke.") and prefixes kernel checks with the C++ source line. `clean_message` keeps every sentence of the
runtime's own, one sentence after another, on one line, and drops only that wrapping.

Standard library only: the serving images carry this module.
"""

from __future__ import annotations

import re


class ModelInputError(Exception):
    """The model refused the request's values or shapes while computing; `str()` is the runtime's message,
    cleaned (`clean_message`). Picklable with its message alone, so it crosses process boundaries whole."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


#: TensorFlow's wrapping around a kernel's message (whole lines dropped).
_TF_NOISE = re.compile(
    r"^(Graph execution error:?|Detected at node .* defined at \(most recent call last\):|<stack traces unavailable>"
    r"|Node: '.*'|\d+ root error\(s\) found\.?|\d+ successful operations\.?|\d+ derived errors ignored\.?"
    r"|Additional GRPC error information.*)$")
#: `{{function_node __inference_x_123}}` before a message, `[[{{node x}}]]` (or `[[StatefulPartitionedCall]]`),
#: `{{node x}}` glued to a sentence's end, and `[Op:...]` after it.
_TF_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")
_TF_NODE_MARKER = re.compile(r"\s*\[\[(?:\{\{node [^}]*\}\}|[A-Za-z_]\w*)\]\]|(?<=\))\{\{node [^}]*\}\}")
#: XLA's appendix: where an op was created (a placeholder location on the line after) and how to dump graphs.
_TF_APPENDIX = re.compile(r"^(The op is created at:|dummy_file_name:\d+:dummy_function_name$|Run with TF_DUMP_GRAPH_PREFIX)")
_TF_DUMP_ADVICE = re.compile(r"\s*Run with TF_DUMP_GRAPH_PREFIX=\S+ and --vmodule=\S+ to obtain a dump of the compiled functions\.")
_TF_OP_MARKER = re.compile(r"\s*\[Op:[^\]]*\](?:\s*name:\s*\S*)?")
#: "(0) INVALID_ARGUMENT: " before each root error of a multi-error text.
_TF_ROOT = re.compile(r"^\(\d+\)\s+[A-Z_]+:\s*")
#: A C++ source location before a LiteRT kernel's check ("tensorflow/lite/kernels/gather.cc:159 ...").
_SOURCE_LOCATION = re.compile(r"^\S+\.(?:cc|c|h|cpp):\d+\s+")
#: LiteRT's next message glued to the previous one without a space ("boundsNode number 3 (GATHER) ...",
#: "failed to invoke.gather index ...": its reporter can hand back an earlier failure's text before this one's).
_GLUED = re.compile(r"(?<=[^\s.!?:;])(?=Node number \d+ \()|(?<=failed to invoke\.)(?=\S)|(?<=failed to prepare\.)(?=\S)")
_END = (".", "!", "?")


def clean_message(text: str) -> str:
    """The runtime's sentences, one after another on one line: TensorFlow's and LiteRT's wrapping dropped,
    glued sentences separated, each ending in a full stop. Never cut: every sentence of the message stays."""
    sentences: list[str] = []
    in_trace = False  # inside TensorFlow's "Detected at node ... defined at" stack (its frames are indented)
    for raw in _GLUED.sub("\n", str(text)).splitlines():
        stripped = raw.strip()
        if in_trace and (raw[:1].isspace() or stripped == "<stack traces unavailable>"):
            continue
        in_trace = stripped.startswith("Detected at node ")
        line = _TF_OP_MARKER.sub("", _TF_NODE_MARKER.sub("", _TF_FUNCTION_NODE.sub("", stripped)))
        line = _SOURCE_LOCATION.sub("", _TF_ROOT.sub("", _TF_DUMP_ADVICE.sub("", line).strip())).strip()
        if not line or _TF_NOISE.match(line) or _TF_APPENDIX.match(line):
            continue
        sentence = line if line.endswith(_END) else line + "."
        if sentence not in sentences:
            sentences.append(sentence)
    return " ".join(sentences) or str(text).strip() or "the model refused this input"


def fresh_report(earlier: str, text: str) -> str:
    """What a LiteRT error says about THIS failure. LiteRT's Python error reporter never empties its buffer
    (it clears the stream's state flags, not its text), so every error carries the text of all the earlier
    ones of the same interpreter before its own: `earlier` is the previous error's whole text."""
    return text[len(earlier):] if earlier and text.startswith(earlier) and len(text) > len(earlier) else text
