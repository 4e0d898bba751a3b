"""The launcher, the first process of a slot's worker: it makes the slot's namespaces and starts its fork server.

Started by worker.py. It enters new namespaces (mount, network, PID, IPC; plus user when not root), joins the slot's
v1 cpu cgroup where that is its CPU quota, mounts a size-limited tmpfs on the slot directory, forks the fork server
(PID 1 of the new PID namespace) and waits for it; without namespaces it becomes the fork server itself. `serve` is
the fork server's life: its set-up, the minimal file tree, the ready message with the slot's layers, then one
request after another (protocol.py) until the parent closes the pipe.

The worker's processes and their modules:
    launcher      launcher.py
    fork server   forkserver.py (set-up, and per test: compile, fork, reply, clean up), watch.py (a running test)
    test process  testproc.py (its set-up calls, the program)
"""

from __future__ import annotations

import json
import os
import signal
import sys

from .cgroups import join_cgroup
from .forkserver import DEVICES, ForkServer, open_proc, read_paths
from .libc import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    PR_SET_PDEATHSIG,
    map_user_namespace,
    mount,
    prctl,
    umount,
    unshare,
)
from .protocol import recv, send
from .rootfs import enter_minimal_root


def main(cfg_json: str | None = None) -> None:
    cfg = json.loads(sys.argv[1] if cfg_json is None else cfg_json)
    req_fd, resp_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    warnings_out: list[str] = []
    layers = {"pid_ns": False, "net_ns": False, "tmpfs": False, "user_ns": False, "landlock": 0,
              "per_slot_uid": False, "ipc_ns": False, "seccomp": False, "cgroup_cpu": None, "cgroup_memory": None,
              "cpu_quota": None}
    cg_cfg = cfg.get("cgroup") or {}
    if cg_cfg.get("cpu_max"):
        # One CPU for the slot: a v2 quota on the slot cgroup its tests join, or a v1 cpu cgroup that this launcher
        # joins now, before it forks the fork server, so that the fork server and every test process inherit it.
        try:
            if cg_cfg.get("cpu_procs"):
                join_cgroup(cg_cfg["cpu_procs"])
            layers["cpu_quota"] = cg_cfg["cpu_max"][0]
        except OSError as exc:
            warnings_out.append(f"cannot join the slot's cpu cgroup ({exc})")
    is_root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | (0 if is_root else CLONE_NEWUSER)
    if "ipc_ns" not in cfg.get("disable", ()):
        flags |= CLONE_NEWIPC  # the slot's own IPC namespace (and a fresh one per test without seccomp)
    try:
        if "namespaces" in cfg.get("disable", ()):
            raise OSError(1, "disabled by configuration")
        unshare(flags)
        if not is_root:
            map_user_namespace(uid, gid)
            layers["user_ns"] = True
        layers["pid_ns"] = layers["net_ns"] = True
    except OSError as exc:
        warnings_out.append(f"namespaces unavailable ({exc}): no private PID space (kill(-1) is contained by "
                            "Landlock signal scoping only if available), no network namespace, no tmpfs, no IPC "
                            "namespace (without seccomp, SysV IPC objects and POSIX message queues outlive a test), no "
                            "minimal file tree (any host path can be stat'ed)")
    slot_dir = cfg["slot_dir"]
    if layers["pid_ns"]:
        try:
            mount("none", "/", None, MS_REC | MS_PRIVATE)
            mount("tmpfs", slot_dir, "tmpfs", MS_NOSUID | MS_NODEV,
                  f"size={cfg['tmpfs_bytes']},nr_inodes={cfg['tmpfs_inodes']},mode=0755")
            layers["tmpfs"] = True
        except OSError as exc:
            warnings_out.append(f"no private tmpfs ({exc}): test directories live in {slot_dir} on the host "
                                "file system; only RLIMIT_FSIZE bounds each file")
        pid = os.fork()
        if pid == 0:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the parent kills a slot by killing the launcher
            serve(cfg, req_fd, resp_fd, layers, warnings_out, is_root)
            os._exit(0)
        os.close(req_fd)
        os.close(resp_fd)
        os.waitpid(pid, 0)
        if layers["tmpfs"]:
            try:
                umount(slot_dir)
            except OSError:
                pass
        os._exit(0)
    serve(cfg, req_fd, resp_fd, layers, warnings_out, is_root)


def serve(cfg, req_fd, resp_fd, layers, warnings_out, is_root) -> None:
    sys.path.extend(p for p in cfg["extra_sys_path"] if p not in sys.path)
    import linecache  # noqa: F401  (used by compile(); imported while the whole host tree is still visible)

    server = ForkServer(cfg, layers, warnings_out, is_root)
    try:  # fork() skips CPython's at-fork work, which is only safe with one thread
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    if threads != 1:
        raise RuntimeError(f"the fork server must have one thread, it has {threads}")
    # Everything the fork server needs from the host is open now: show tests a minimal tree (the interpreter, its
    # libraries, a few devices, the slot's tmpfs), no host sockets and no other host path to stat.
    layers["minimal_root"] = False
    if layers["tmpfs"] and "minimal_root" not in cfg.get("disable", ()):
        try:
            proc = enter_minimal_root(cfg["slot_dir"] + ".root", read_paths(cfg), list(DEVICES), [cfg["slot_dir"]])
            layers["minimal_root"] = True
            if proc is not None and server.pidns_fd is not None:
                server.proc_options = proc
                server.proc_dev = os.stat("/proc").st_dev
        except OSError as exc:
            warnings_out.append(f"no minimal file tree ({exc}): programs can stat any host path and see host "
                                "sockets (connecting to them needs AF_UNIX sockets, which seccomp denies)")
    server.share_one_ruleset()  # after the minimal tree: its bind of the slot directory is what tests see
    layers["proc_per_test"] = server.proc_dev is not None
    if server.own_proc is not None:
        os.close(server.own_proc)
    server.own_proc = open_proc()  # the slot's proc (the host's without the tree), before a test mounts its own
    send(resp_fd, {"ready": True, "layers": layers, "warnings": server.warnings})
    while True:
        req = recv(req_fd)
        if req is None:
            if server.private_cg is not None:  # every test is reaped: the cgroup is empty
                try:
                    os.rmdir(server.private_cg[1], dir_fd=server.private_cg[0])
                except OSError:
                    pass
            return
        reply, buffers = server.run_test(req)
        try:
            send(resp_fd, reply, buffers)
        finally:
            server.clean_up()  # after the verdict's data is on its way (see run_test)
