"""File trees of a slot: the minimal root its mount namespace pivots into, and the removal of a test's tree.

`enter_minimal_root` (once, in the fork server) leaves a test nothing of the host's file tree but read-only binds of
what it may read, a few devices, a proc and the slot's tmpfs; `remove_tree` removes whatever a test left, at any
depth, without ever raising (also used by the parent for its slots' directory).
"""

from __future__ import annotations

import ctypes
import os

from .libc import (
    LIBC,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_REC,
    check,
    mount,
    umount,
)

# ---------------------------------------------------------------- a minimal file tree (mount namespace)

MS_REMOUNT = 32
MS_BIND = 4096
_SYS_pivot_root = {"x86_64": 155, "aarch64": 41}
# statvfs f_flag bits -> mount flags a read-only bind remount must keep (they may be locked in a user namespace)
_ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: 1024, 2048: 2048, 4096: 1 << 21}


def pivot_root(new_root: str, put_old: str) -> None:
    nr = _SYS_pivot_root.get(os.uname().machine)
    if nr is None:
        raise OSError(38, "pivot_root: unknown architecture")
    check(LIBC.syscall(ctypes.c_long(nr), new_root.encode(), put_old.encode()), "pivot_root")


def _mirror(root: str, path: str, depth: int = 0) -> str:
    """Create under `root` the directories and symlinks (same link text) on the way to host `path`; return the
    host path of what `path` finally names, with no symlink left in it."""
    if depth > 40:
        raise OSError(40, f"too many symlinks under {path}")
    parts = [p for p in path.split("/") if p]
    host = "/"
    for i, part in enumerate(parts):
        nxt = os.path.join(host, part)
        inside = root + nxt
        if os.path.islink(nxt):
            target = os.readlink(nxt)
            if not os.path.lexists(inside):
                os.symlink(target, inside)
            resolved = os.path.normpath(target if target.startswith("/") else os.path.join(host, target))
            rest = "/".join(parts[i + 1:])
            return _mirror(root, os.path.join(resolved, rest) if rest else resolved, depth + 1)
        if i < len(parts) - 1 and not os.path.isdir(inside):
            os.mkdir(inside, 0o755)
        host = nxt
    return host


def make_read_only(path: str) -> None:
    """Remount the mount at `path` read-only (this mount only, not its file system), keeping its other flags (some
    may be locked in a user namespace). Mounting on a directory under it stays possible."""
    keep = 0
    st = os.statvfs(path)
    for bit, flag in _ST_TO_MS.items():
        if st.f_flag & bit:
            keep |= flag
    mount("none", path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def _bind(source: str, target: str, read_only: bool) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        try:
            make_read_only(target)
        except OSError:
            pass  # stays writable: Landlock still denies writes


PROC_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC


def enter_minimal_root(new_root: str, read_paths: list[str], devices: list[str], writable: list[str]) -> bytes | None:
    """Make the calling process's mount namespace show only `read_paths` (read-only binds), `devices` and
    `writable` (binds) on a small empty tmpfs, at their host paths, and pivot into it; the host tree is detached.
    Returns the options its proc was mounted with (None: no proc), for the proc each test mounts over it.

    Call in a private mount namespace (mount propagation private), with CAP_SYS_ADMIN in its user namespace.
    """
    proc_options = None
    os.makedirs(new_root, exist_ok=True)
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=8192,mode=0755")
    try:
        targets: dict[str, str] = {}
        for p in read_paths + devices + writable:
            if os.path.lexists(p):
                targets[_mirror(new_root, p)] = "dev" if p in devices else "rw" if p in writable else "ro"
        done: list[str] = []
        for host in sorted(targets):
            if not os.path.exists(host) or any(host == d or host.startswith(d.rstrip("/") + "/") for d in done):
                continue
            inside = new_root + host
            if os.path.isdir(host):
                os.makedirs(inside, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(inside), exist_ok=True)
                if not os.path.lexists(inside):
                    os.close(os.open(inside, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            _bind(host, inside, read_only=targets[host] == "ro")
            done.append(host)
        # /dev/stdin & co. (programs open them): links into a proc of this PID namespace that shows a process
        # only its own entries (hidepid=2) and no system files (subset=pid). Best effort: a user namespace may
        # not mount proc (e.g. when the host's /proc has masked entries); then those links dangle.
        os.makedirs(new_root + "/dev", exist_ok=True)
        for name, target in (("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2"), ("fd", "/proc/self/fd")):
            if not os.path.lexists(f"{new_root}/dev/{name}"):
                os.symlink(target, f"{new_root}/dev/{name}")
        os.makedirs(new_root + "/proc", exist_ok=True)
        for options in (b"hidepid=2,subset=pid", b"hidepid=2"):
            try:
                mount(b"proc", new_root + "/proc", b"proc", PROC_FLAGS, options)
                proc_options = options
                break
            except OSError:
                continue
        old = os.path.join(new_root, ".old")
        os.mkdir(old, 0o700)
        pivot_root(new_root, old)
        os.chdir("/")
        umount("/.old")
        os.rmdir("/.old")
    except BaseException:
        try:
            umount(new_root)
        except OSError:
            pass
        raise
    try:
        mount("none", "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        pass
    return proc_options


# ---------------------------------------------------------------- removal that cannot fail


def remove_tree(path: str, max_steps: int = 1_000_000) -> bool:
    """Remove `path` and everything under it without recursion (any depth), one descriptor at a time, and
    without raising: True when it is gone. Meant for directories whose writers are all dead (a test's)."""
    import stat as _stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not _stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError:
            return False
        return True
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    names: list[str] = []  # path from `path` down to the directory `fd` is
    stuck: set[tuple[int, int]] = set()  # directories that could not be emptied: never entered again
    steps = 0
    try:
        while steps < max_steps:
            steps += 1
            entered = False
            try:
                entries = os.listdir(fd)
            except OSError:
                entries = []
            for name in entries:
                steps += 1
                try:
                    os.unlink(name, dir_fd=fd)
                    continue
                except FileNotFoundError:
                    continue
                except OSError:
                    pass
                try:
                    os.rmdir(name, dir_fd=fd)
                    continue
                except OSError:
                    pass
                try:
                    child = os.open(name, flags, dir_fd=fd)
                except OSError:
                    continue
                cst = os.fstat(child)
                if (cst.st_dev, cst.st_ino) in stuck:
                    os.close(child)
                    continue
                try:
                    os.fchmod(child, 0o700)
                except OSError:
                    pass
                os.close(fd)
                fd, entered = child, True
                names.append(name)
                break
            if entered:
                continue
            if not names:
                break
            here = os.fstat(fd)
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            name = names.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                stuck.add((here.st_dev, here.st_ino))
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
