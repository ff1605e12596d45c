"""A command served by this user's resident compile server: the client side
(TOOLCHAIN.md section 12), light enough to run before click or anything
heavy is imported.

Where a server lives: one per user and loom build, its socket
`<folder>/<key>.sock` and its lock `<folder>/<key>.lock` in a private
folder, `$XDG_RUNTIME_DIR/loom`, else `$TMPDIR/loom-<uid>` (or `/tmp/...`).
The folder is used only if it is a real folder (no symlink) this user owns
that nobody else may enter (`private`); `key` names the loom build
(`loomcli.service.fingerprint.server_key`). The server holds the lock as
long as it lives, so exactly one runs per key, and whoever takes the free
lock is the one that starts it (`start`).

The protocol, over a stream socket (nothing in it is code or pickled data):
- request: a little-endian u32 length, then NUL-separated byte tokens
  (`MAGIC`, the key, the operation, and for `run` the umask, the standard
  streams' wrapping, the descriptor numbers, argv and the environment); a
  `run` request carries descriptors (`SCM_RIGHTS`): the working folder, each
  open standard stream, the jobserver pipe MAKEFLAGS names;
- then frames of five bytes, a kind and a little-endian i32: from the
  server `A` (accepted: the command runs), `X` code (it exited), `K` signal
  (it was killed by one), `R` (refused: run it yourself), `J` length (a
  status JSON document follows); from the client `S` signal (forward it).
A client that goes away ends its command (the server sends it SIGTERM,
then SIGKILL); outputs are published all or nothing, as always.
"""

from __future__ import annotations

import io
import os
import sys

TYPE_CHECKING = False  # typing would cost every served command more than this module's whole work
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

MAGIC = b"loom-serve-1"
ENV_MODE = "LOOM_SERVER"
ENV_IDLE = "LOOM_SERVER_IDLE"
ENV_ORIGIN = "LOOM_SERVER_ORIGIN"  # the starter's `shapes_python` environment, as JSON (`start`)
MODES = ("auto", "off")
DEFAULT_IDLE = 600
MAX_IDLE = 7 * 24 * 3600
MAX_REQUEST = 16 << 20   # argv and the environment; the kernel's own limit is far below
FRAME = 5
_SIGNALS = (2, 15, 1)    # SIGINT, SIGTERM, SIGHUP (`signal` would cost an enum import here)


class BadSetting(ValueError):
    """An environment value loom cannot use: the message names it."""


def mode(environ: Mapping[str, str]) -> str:
    """`LOOM_SERVER`: "" (unset: use a running server), "auto" or "off"."""
    value = environ.get(ENV_MODE, "")
    if value not in ("", *MODES):
        raise BadSetting(f"{ENV_MODE}={value!r}: expected auto or off (unset: use a running server)")
    return value


def idle_timeout(environ: Mapping[str, str], given: str | None = None) -> int:
    """The idle timeout in whole seconds: `given` (`--idle-timeout`), else
    `LOOM_SERVER_IDLE`, else 600."""
    name = "--idle-timeout" if given is not None else ENV_IDLE
    text = given if given is not None else environ.get(ENV_IDLE, "")
    if not text.strip():
        return DEFAULT_IDLE
    try:
        seconds = int(text.strip())
    except ValueError:
        seconds = 0
    if not 1 <= seconds <= MAX_IDLE:
        raise BadSetting(f"{name}={text!r}: expected whole seconds from 1 to {MAX_IDLE}")
    return seconds


def folder(environ: Mapping[str, str]) -> str:
    """The folder this user's servers live in (see the module docstring)."""
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        return os.path.join(runtime, "loom")
    tmp = environ.get("TMPDIR", "")
    return os.path.join(tmp if tmp.startswith("/") else "/tmp", f"loom-{os.geteuid()}")


def private(path: str) -> bool:
    """Whether `path` is a folder (not a symlink) of this user that nobody else may enter."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (st.st_mode & 0o170000) == 0o040000 and st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0


def socket_path(place: str, key: str) -> str:
    return os.path.join(place, f"{key}.sock")


def launcher_link(place: str, launcher: str) -> str:
    """Where the server started through `launcher` (a `loom` script) links
    its socket for the native client (`client.c`), which cannot compute a
    key: named by the FNV-1a hash of the launcher's path."""
    h = 0xcbf29ce484222325
    for byte in os.fsencode(launcher):
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return os.path.join(place, f"launcher-{h:016x}.via")


# The environment that shapes the interpreter a launcher starts (its paths,
# flags and stream encodings): a native request runs only if its own is the
# server's starter's (`resident.Server.native`).
def shapes_python(name: str) -> bool:
    return name.startswith(("PYTHON", "LANG", "LC_"))


def launcher() -> str | None:
    """This process's `loom` script, if it was started through one (a file
    beginning with `#!`, as a console script is): the native client's
    stand-in runs it."""
    path = sys.argv[0] if sys.argv else ""
    if not path.startswith("/"):
        return None
    try:
        with open(path, "rb") as f:
            return path if f.read(2) == b"#!" else None
    except OSError:
        return None


def lock_path(place: str, key: str) -> str:
    return os.path.join(place, f"{key}.lock")


# ---------------------------------------------------------------- talking to a server


def connect(place: str, key: str) -> object | None:
    """A socket connected to the server of `key`, None if there is none (no
    socket, a stale one, a folder that is not private, a server of another user)."""
    import _socket

    if not private(place):
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(socket_path(place, key))
        cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        if int.from_bytes(cred[4:8], sys.byteorder) not in (os.geteuid(), 0):
            raise OSError("the server is another user's")
    except OSError:
        sock.close()
        return None
    return sock


def send_request(sock: object, tokens: Sequence[bytes], fds: Sequence[int] = ()) -> None:
    """One request: its tokens framed, `fds` attached to its first bytes."""
    import _socket

    body = b"\0".join(tokens)
    data = len(body).to_bytes(4, "little") + body
    ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))]
    sent = sock.sendmsg([data], ancillary if fds else [])  # type: ignore[attr-defined]
    if sent < len(data):
        sock.sendall(data[sent:])  # type: ignore[attr-defined]


def read_frame(sock: object) -> tuple[bytes, int] | None:
    """The next (kind, value) frame, None at the end of the stream."""
    data = b""
    while len(data) < FRAME:
        chunk = sock.recv(FRAME - len(data))  # type: ignore[attr-defined]
        if not chunk:
            return None
        data += chunk
    return data[:1], int.from_bytes(data[1:], "little", signed=True)


def frame(kind: bytes, value: int) -> bytes:
    return kind + value.to_bytes(4, "little", signed=True)


def stream_tokens() -> tuple[list[bytes], list[int]] | None:
    """The wrapping of each standard stream as four tokens (empty for a
    closed one) and the descriptors of the open ones; None if one is not
    the file its number says (a program that replaced `sys.stdout`): then
    only this process can write where the command's output must go."""
    tokens: list[bytes] = []
    fds: list[int] = []
    for fd, stream in enumerate((sys.stdin, sys.stdout, sys.stderr)):
        if stream is None:
            tokens += [b"", b"", b"", b""]
            continue
        try:
            if stream.fileno() != fd:
                return None
            os.fstat(fd)
            if not isinstance(stream, io.TextIOWrapper) or not isinstance(stream.errors, str):
                return None  # not what the interpreter makes: the child could not make the same
            spec = [stream.encoding, stream.errors, "1" if stream.line_buffering else "0",
                    "1" if stream.write_through else "0"]
        except (AttributeError, ValueError, OSError):
            return None
        tokens += [s.encode() for s in spec]
        fds.append(fd)
    return tokens, fds


def serve(argv: Sequence[str], key: str, auto: bool) -> int | None:
    """Run `loom ARGV` in this user's server of `key` and wait for it: its
    exit status (a forwarded signal that killed it kills us too). None: no
    server took it (none runs, a stale socket, a refusal), so run it here;
    with `auto`, a server is started meanwhile for the next command."""
    import _signal  # type: ignore[import-not-found]  # no stub; the light, enum-free signal module

    environ = os.environ
    place = folder(environ)
    sock = connect(place, key)
    if sock is None:
        if auto:
            start(place, key, idle_timeout(environ))
        return None
    from loomcli.runtime.spawn import inherited_fds

    standard = stream_tokens()
    try:
        if standard is None:
            raise OSError("not servable")
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # a folder that is gone: the command reports it as it would here
        sock.close()  # type: ignore[attr-defined]
        return None
    streams, stream_fds = standard
    jobserver = list(inherited_fds(environ))
    umask = os.umask(0o022)
    os.umask(umask)
    env = [k + b"=" + v for k, v in os.environb.items()]
    tokens = [MAGIC, key.encode(), b"run", str(umask).encode(), *streams,
              str(len(jobserver)).encode(), *(str(fd).encode() for fd in jobserver),
              str(len(argv)).encode(), *(os.fsencode(a) for a in argv), str(len(env)).encode(), *env]
    received: list[int] = []

    def forward(signum: int, frame_: object) -> None:
        received.append(signum)
        try:
            sock.sendall(frame(b"S", signum))  # type: ignore[attr-defined]
        except OSError:
            pass

    old = {sig: _signal.signal(sig, forward) for sig in _SIGNALS}
    accepted = False
    reply = None
    try:
        try:
            send_request(sock, tokens, [cwd, *stream_fds, *jobserver])
        finally:
            os.close(cwd)
        first = read_frame(sock)
        accepted = first is not None and first[0] == b"A"
        if accepted:
            reply = read_frame(sock)
    except OSError:
        pass
    finally:
        sock.close()  # type: ignore[attr-defined]
        for sig, handler in old.items():
            _signal.signal(sig, handler)
    if not accepted:  # refused, or gone before it ran: nothing ran, so it runs here
        for signum in received[:1]:  # unless the user meant to stop it meanwhile
            _die_of(signum)
        return None
    if reply is None or reply[0] not in (b"X", b"K"):
        print("loom: error: the loom server ended while it ran this command", file=sys.stderr)
        return 3
    kind, value = reply
    if kind == b"X":
        return value
    if value in received:  # it died of the signal we forwarded: so do we, as it would have run here
        _die_of(value)
    print(f"loom: error: internal: the command crashed in the loom server (signal {value})", file=sys.stderr)
    return 3


def _die_of(signum: int) -> None:
    """End this process by `signum`'s default action (a shell then sees that signal)."""
    import _signal

    _signal.signal(signum, _signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default is to go on


def start(place: str, key: str, idle: int, ready: int | None = None) -> bool:
    """Start the server of `key` in the background if nobody runs or starts
    one: whoever takes the free lock starts it and hands the lock over, so
    concurrent first uses start exactly one. `ready`: a descriptor the
    server writes one line to once it serves (or cannot). Whether one was started."""
    lock = take_lock(place, key)
    if lock is None:
        return False
    try:
        import subprocess

        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", ENV_MODE)}
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        import json

        env[ENV_ORIGIN] = json.dumps({k: v for k, v in os.environ.items() if shapes_python(k)})
        argv = [sys.executable, *subprocess._args_from_interpreter_flags(), "-P", "-m", "loomcli",  # type: ignore[attr-defined]
                "server", "run", "--idle-timeout", str(idle), "--lock-fd", str(lock)]
        script = launcher()
        if script is not None:
            argv += ["--launcher", script]
        keep = [lock]
        if ready is not None:
            argv += ["--ready-fd", str(ready)]
            keep.append(ready)
        subprocess.Popen(argv, cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, pass_fds=keep, start_new_session=True)
    except OSError:
        return False
    finally:
        os.close(lock)
    return True


def take_lock(place: str, key: str, wait: bool = False) -> int | None:
    """A descriptor holding the lock of `key` (the folder made private if it
    is missing), None if someone holds it (with `wait`: once they let go)
    or the folder cannot be used."""
    import fcntl

    try:
        os.mkdir(place, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    if not private(place):
        return None
    path = lock_path(place, key)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            # The holder removes the file as it ends: a lock on a removed file locks nothing.
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd
        except OSError:  # held by another (LOCK_NB), or the file went away meanwhile
            if not wait:
                os.close(fd)
                if os.path.lexists(path):
                    return None
                continue
        os.close(fd)
