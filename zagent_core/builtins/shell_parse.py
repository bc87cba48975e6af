"""Whether a shell command only reads: the test that lets ``shell`` calls run side by side.

The answer must never be "reads" for a command that writes, so the reading is
conservative: the command is split into words and operators the way ``/bin/sh`` would
(quotes, backslashes, comments), and it is read-only only when every simple command of
it is a known reader used in a way that cannot write or run anything else. Whatever this
reading does not fully understand (``$`` expansions, backticks, subshells, here-documents,
background ``&``, variable assignments, globs where a file name could turn into a flag)
makes the command a barrier: it then runs alone, which is slower, never wrong. So do the
git readers a repository's config can make run a program (``git status`` runs
``core.fsmonitor``, ``git diff`` runs ``diff.external``): the config is a file of the
workspace, which any process there may have written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

#: Redirection targets that are not files anyone keeps.
_DISCARD = frozenset({"/dev/null"})
#: Operators that join simple commands without changing what each one does.
_SEPARATORS = frozenset({";", "&&", "||", "|", "\n"})
_OPERATOR_CHARS = ";&|<>()\n"
_GLOB_CHARS = "*?["


class _Unsure(Exception):
    """The command uses something this reading does not vouch for."""


@dataclass
class _Word:
    text: str
    #: Holds an unquoted ``*``, ``?`` or ``[``: the shell may turn it into any file name.
    globbed: bool = False


@dataclass
class _Op:
    text: str


def _operator(command: str, at: int) -> str:
    for candidate in ("&&", "||", ";;", "<<-", "<<<", "<<", ">>", ">|", ">&", "<&", "<>", "&>", "|&"):
        if command.startswith(candidate, at):
            return candidate
    return command[at]


def _tokens(command: str) -> list[_Word | _Op]:
    """Words and operators of ``command``; raises :class:`_Unsure` at anything it cannot read."""
    tokens: list[_Word | _Op] = []
    word: list[str] = []
    started = globbed = quoted = False
    i, n = 0, len(command)

    def finish() -> None:
        nonlocal started, globbed, quoted
        if started:
            tokens.append(_Word("".join(word), globbed))
        word.clear()
        started = globbed = quoted = False

    while i < n:
        char = command[i]
        if char == "'":
            i = _single_quoted(command, i + 1, word)
            started = quoted = True
        elif char == '"':
            i = _double_quoted(command, i + 1, word)
            started = quoted = True
        elif char == "\\":
            if i + 1 < n and command[i + 1] != "\n":
                word.append(command[i + 1])
                started = quoted = True
            i += 2
        elif char in "$`":
            raise _Unsure("expansion")
        elif char in " \t":
            finish()
            i += 1
        elif char == "#" and not started:
            end = command.find("\n", i)
            i = n if end < 0 else end
        elif char in _OPERATOR_CHARS:
            # A file descriptor number (2>...) is part of the redirection: no word of its own.
            started = started and not _descriptor_number(char, word, quoted)
            finish()
            op = _operator(command, i)
            tokens.append(_Op(op))
            i += len(op)
        else:
            globbed = globbed or char in _GLOB_CHARS
            word.append(char)
            started = True
            i += 1
    finish()
    return tokens


def _single_quoted(command: str, at: int, word: list[str]) -> int:
    """Add the text of the single quote opened just before ``at`` to ``word``; return where the command goes on."""
    end = command.find("'", at)
    if end < 0:
        raise _Unsure("unterminated quote")
    word.append(command[at:end])
    return end + 1


def _descriptor_number(char: str, word: list[str], quoted: bool) -> bool:
    """Whether ``word``, just before the operator ``char``, is the file descriptor of a redirection."""
    return char in "<>" and not quoted and "".join(word).isdigit()


def _double_quoted(command: str, at: int, word: list[str]) -> int:
    i, n = at, len(command)
    while i < n:
        char = command[i]
        if char == '"':
            return i + 1
        if char in "$`":
            raise _Unsure("expansion")
        if char == "\\" and i + 1 < n and command[i + 1] in '"\\$`\n':
            if command[i + 1] != "\n":
                word.append(command[i + 1])
            i += 2
            continue
        word.append(char)
        i += 1
    raise _Unsure("unterminated quote")


def _simple_commands(tokens: list[_Word | _Op]) -> list[list[_Word]]:
    """The simple commands, their harmless redirections dropped; :class:`_Unsure` at any other."""
    commands: list[list[_Word]] = [[]]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if isinstance(token, _Word):
            commands[-1].append(token)
        elif token.text in _SEPARATORS:
            commands.append([])
        elif token.text in (">&", "<&"):
            # Duplicating or closing a descriptor (2>&1, >&2, <&-); a file name here writes.
            target = tokens[i + 1] if i + 1 < len(tokens) else None
            if not (isinstance(target, _Word) and not target.globbed
                    and (target.text.isdigit() or target.text in ("-", *_DISCARD))):
                raise _Unsure("redirection into a file")
            i += 1
        elif token.text in (">", ">>", ">|"):
            target = tokens[i + 1] if i + 1 < len(tokens) else None
            if not (isinstance(target, _Word) and target.text in _DISCARD and not target.globbed):
                raise _Unsure("redirection into a file")
            i += 1
        elif token.text == "<":
            target = tokens[i + 1] if i + 1 < len(tokens) else None
            if not isinstance(target, _Word):
                raise _Unsure("input redirection without a file")
            i += 1  # reading a file is reading
        else:  # & | ( ) << <<< <> &> |& ;;: background, subshells, here-documents, read-write opens
            raise _Unsure(f"operator {token.text!r}")
        i += 1
    return [command for command in commands if command]


# -- the readers ----------------------------------------------------------------------------

def _any(args: list[str]) -> bool:
    return True


def _abbreviates(arg: str, options: tuple[str, ...]) -> bool:
    """Whether long option ``arg`` (``--name`` or ``--name=value``) may be one of ``options``: GNU getopt
    and git take any unambiguous start of a long option's name for the whole of it (``--out`` is
    ``--output``), so a name that starts one of them may be it."""
    name = arg.split("=", 1)[0]
    return len(name) > 2 and any(option.startswith(name) for option in options)


def _no_option(*forbidden: str, short: str = "") -> Callable[[list[str]], bool]:
    """Refuses the long options ``forbidden`` (or a start of their name) and short clusters holding a letter
    of ``short``."""
    def check(args: list[str]) -> bool:
        for arg in args:
            if arg == "--":
                return True
            if arg.startswith("--") and _abbreviates(arg, forbidden):
                return False
            if arg.startswith("-") and not arg.startswith("--") and (
                    arg in forbidden or any(letter in arg[1:] for letter in short)):
                return False
        return True
    return check


def _at_most_positional(count: int) -> Callable[[list[str]], bool]:
    """``uniq IN OUT`` and ``xxd IN OUT`` write their second file name."""
    def check(args: list[str]) -> bool:
        return sum(1 for arg in args if not arg.startswith("-") or arg == "-") <= count
    return check


_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"})

_SED_ADDRESS = r"(?:\d+|\$|/(?:[^/\\]|\\.)*/)"
_SED_COMMAND = re.compile(
    rf"^(?:{_SED_ADDRESS}(?:,(?:{_SED_ADDRESS}|\+\d+))?)?!?"
    r"(?:[pPlq=d]|s/(?:[^/\\]|\\.)*/(?:[^/\\]|\\.)*/[gpiI0-9]*)?$"
)


def _sed(args: list[str]) -> bool:
    """Read-only when not in place and every script command only prints, deletes or substitutes
    in what it prints (``w``, ``W``, ``e``, ``r`` and script files are refused)."""
    scripts: list[str] = []
    positional: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in ("-n", "--quiet", "--silent", "-E", "-r", "--regexp-extended", "-s", "--separate", "-z",
                   "--null-data", "-u", "--unbuffered", "--posix"):
            continue
        if arg in ("-e", "--expression"):
            scripts.append(next(it, ""))
        elif arg.startswith("--expression="):
            scripts.append(arg.split("=", 1)[1])
        elif arg.startswith("-") and arg != "-":
            return False  # -i, -f, --in-place, clusters: not vouched for
        else:
            positional.append(arg)
    if not scripts:
        if not positional:
            return False
        scripts.append(positional[0])
    return all(_SED_COMMAND.match(part.strip()) for script in scripts for part in re.split(r"[;\n]", script))


_GIT_READERS = frozenset({"log", "show", "diff", "status", "blame", "ls-files", "rev-parse", "describe",
                          "shortlog", "grep", "show-ref", "ls-tree", "cat-file", "merge-base", "rev-list"})
#: Listing forms only: with a name, these create, rename or delete.
_GIT_LISTERS = {
    "branch": frozenset({"-a", "-r", "-v", "-vv", "--all", "--remotes", "--verbose", "--list", "-l",
                         "--show-current", "--no-color", "--color"}),
    "tag": frozenset({"-l", "--list", "-n"}),
    "remote": frozenset({"-v", "--verbose"}),
}


#: Options of the git readers that write a file or run a program (``--output-indicator-new`` too: refused, never wrong).
_GIT_WRITING = ("--output", "--open-files-in-pager")


def _git_subcommand(args: list[str]) -> tuple[str, list[str]] | None:
    """The git subcommand ``args`` run and its options, past the global options a reader may take."""
    rest = list(args)
    while rest and rest[0] in ("--no-pager", "-C", "--no-optional-locks"):
        rest = rest[2:] if rest[0] == "-C" else rest[1:]
    return (rest[0], rest[1:]) if rest else None


def _git(args: list[str]) -> bool:
    found = _git_subcommand(args)
    if found is None:
        return False
    sub, options = found
    if sub in _GIT_LISTERS:
        return all(option in _GIT_LISTERS[sub] for option in options)
    if sub not in _GIT_READERS:
        return False
    # --output writes a file; grep -O opens files in a program of the model's choosing, also inside a
    # cluster of short options (-iOvim).
    return not any(o.startswith(_GIT_WRITING) or (o.startswith("--") and _abbreviates(o, _GIT_WRITING))
                   or (sub == "grep" and o.startswith("-") and not o.startswith("--") and "O" in o)
                   for o in options)


#: Known readers, and how their arguments must look. ``True``: a globbed file name cannot
#: turn the command into a writer (no option of it writes or runs anything).
_READERS: dict[str, tuple[Callable[[list[str]], bool], bool]] = {
    **{name: (_any, True) for name in (
        "cat", "head", "tail", "wc", "ls", "grep", "egrep", "fgrep", "pwd", "echo", "printf", "stat", "du", "df",
        "basename", "dirname", "realpath", "readlink", "nl", "cut", "tr", "od", "diff", "cmp", "column",
        "md5sum", "sha1sum", "sha256sum", "sha512sum", "cksum", "true", "false", "which", "printenv", "jq",
        "hexdump", "comm", "tac", "rev", "fold", "expand", "strings", "cd", "test", "sleep",
    )},
    # --pre and --hostname-bin run a program of the caller's choosing.
    "rg": (_no_option("--pre", "--hostname-bin"), False),
    "find": (lambda args: not any(arg in _FIND_ACTIONS for arg in args), False),
    "sed": (_sed, False),
    "git": (_git, False),
    "sort": (_no_option("--output", "--compress-program", short="o"), False),
    "uniq": (_at_most_positional(1), False),
    "xxd": (_at_most_positional(1), False),
    # -o writes its file; -H writes HTML, with -R a 00Tree.html in every folder.
    "tree": (_no_option(short="oRH"), False),
    "file": (_no_option("--compile", short="C"), False),
}


#: git readers that the repository's own config can make run a program: whatever reads the index
#: runs ``core.fsmonitor``'s hook, a diff runs ``diff.external`` or the textconv or clean filter of a
#: driver ``.gitattributes`` names, and a log has ``gpg.program`` check signatures when
#: ``log.showSignature`` or ``format.pretty`` asks. Any process of the workspace can write
#: ``.git/config``, so these read only as far as that file says: they run alone.
_GIT_RUNS_CONFIGURED = frozenset({"status", "diff", "log", "show", "blame", "grep", "ls-files"})
#: Options by which the other git readers do the same (a format that checks signatures, a textconv,
#: the worktree's state).
_GIT_CONFIGURED_OPTIONS = ("--format", "--pretty", "--show-signature", "--textconv", "--filters", "--ext-diff",
                           "--dirty", "--broken")


def _runs_configured_program(words: list[_Word]) -> bool:
    """Whether a reader's simple command is a git command that may run a program its config names."""
    found = _git_subcommand([word.text for word in words[1:]]) if words[0].text == "git" else None
    if found is None:
        return False
    sub, options = found
    return sub in _GIT_RUNS_CONFIGURED or any(option.startswith("--") and _abbreviates(option, _GIT_CONFIGURED_OPTIONS)
                                              for option in options)


def _reads_only(words: list[_Word]) -> bool:
    name = words[0]
    reader = _READERS.get(name.text)
    if reader is None or name.globbed:
        return False
    check, glob_harmless = reader
    args = words[1:]
    if not glob_harmless and any(arg.globbed for arg in args):
        return False
    return check([arg.text for arg in args])


def _read_commands(command: str) -> list[list[_Word]] | None:
    """The simple commands of ``command`` when it provably only reads, else ``None``."""
    try:
        commands = _simple_commands(_tokens(command))
    except _Unsure:
        return None
    if commands and all(_reads_only(words) for words in commands):
        return commands
    return None


def is_read_only(command: str) -> bool:
    """Whether ``command`` provably only reads (see the module's docstring); ``False`` when unsure, and for
    the git readers a repository's config can make run a program (``git status``, ``git diff``...)."""
    commands = _read_commands(command)
    return commands is not None and not any(_runs_configured_program(words) for words in commands)


#: Commands whose output is what they read: the start of it matters as much as the end.
_EXPLORERS = frozenset({"cat", "head", "tail", "grep", "egrep", "fgrep", "rg", "ls", "find", "sed", "tree", "cd"})
_GIT_EXPLORERS = frozenset({"log", "show", "diff", "status"})


def explores(command: str) -> bool:
    """Whether ``command`` reads, with explorers only (``cat``, ``grep``, ``git log``...): its output is what it
    read. (``git log`` explores, though it runs alone: its config may run a program.)"""
    commands = _read_commands(command)
    if commands is None:
        return False
    for words in commands:
        name, args = words[0].text, [w.text for w in words[1:] if not w.text.startswith("-")]
        if name == "git" and not (args and args[0] in _GIT_EXPLORERS):
            return False
        if name != "git" and name not in _EXPLORERS:
            return False
    return True
