"""The server's options under the names that say what they count (`--model-processes`, `--interpreters`), their
older spellings still accepted and hidden from --help, and the images' command line written with the new ones."""

from __future__ import annotations

import pytest

from builder.server.options import parse, parser, to_argv


@pytest.mark.parametrize("argv", [["m", "--model-processes", "2", "--interpreters", "3"],
                                  ["m", "--processes", "2", "--workers", "3"],
                                  ["m", "--processes", "2", "--interpreters", "3"]])
def test_new_and_old_spellings_set_the_same_options(argv: list[str]) -> None:
    args = parse(argv, "tfsmith-serve")
    assert (args.processes, args.workers) == (2, 3)


def test_unset_they_are_auto_and_auto_is_accepted_under_either_name() -> None:
    assert (parse(["m"], "x").processes, parse(["m"], "x").workers) == (None, None)
    assert parse(["m", "--processes", "auto"], "x").processes is None


def test_help_lists_the_new_names_and_only_mentions_the_old() -> None:
    text = parser("tfsmith-serve").format_help()
    assert "--model-processes N" in text and "--interpreters N" in text
    assert "formerly `--processes`, still accepted" in " ".join(text.split())
    usage = text.split("\n\n")[0]
    assert "--processes" not in usage.replace("--model-processes", "") and "--workers" not in usage


def test_an_image_is_told_the_new_names() -> None:
    assert to_argv({"processes": 2, "workers": 1}) == ["--model-processes", "2", "--interpreters", "1"]
