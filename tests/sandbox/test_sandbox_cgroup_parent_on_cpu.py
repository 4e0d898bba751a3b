"""Where the slot cgroups go on cgroup v2 (mrgrpo.sandbox.cgroups): our own cgroup holds processes, so it cannot give
its children the memory controller; the sandbox then makes `mrgrpo-sandbox-<pid>` next to it, under the nearest
ancestor that already delegates memory (the GPU machine's `/process_api/<id>` case), and removes it with its last slot.

The kernel side is faked: a directory tree whose mkdir/rmdir behave like cgroupfs (a new cgroup gets its interface
files, `memory.max` only when its parent delegates memory; a cgroup's subtree_control refuses `+memory` while it
holds processes). On a real v2 host the same path runs in the sandbox tests.
"""

from __future__ import annotations

import os

import pytest

from mrgrpo.sandbox import cgroups


class FakeCgroupFS:
    """mkdir/rmdir under `root` as cgroupfs does them; a cgroup is busy (holds processes) when it has a `.busy`."""

    def __init__(self, root, monkeypatch):
        self.root = str(root)
        self._mkdir, self._rmdir = os.mkdir, os.rmdir
        monkeypatch.setattr(os, "mkdir", self.mkdir)
        monkeypatch.setattr(os, "rmdir", self.rmdir)
        monkeypatch.setattr(cgroups, "_write", self.write)

    def _inside(self, path) -> bool:
        return os.path.abspath(path).startswith(self.root + os.sep)

    def cgroup(self, rel: str, controllers=("cpu", "memory"), subtree=(), busy=False) -> str:
        d = os.path.join(self.root, rel)
        os.makedirs(d, exist_ok=True)
        for name, text in (("cgroup.controllers", " ".join(controllers)), ("cgroup.subtree_control", " ".join(subtree)),
                           ("cgroup.procs", ""), ("cpu.stat", "usage_usec 0\n")):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        if busy:
            open(os.path.join(d, ".busy"), "w").close()
        return d

    def mkdir(self, path, mode=0o777):
        if not self._inside(path):
            return self._mkdir(path, mode)
        self._mkdir(path, mode)
        parent = os.path.dirname(os.path.abspath(path))
        delegated = cgroups._read_words(os.path.join(parent, "cgroup.subtree_control"))
        rel = os.path.relpath(path, self.root)
        self.cgroup(rel, controllers=delegated)
        if "memory" in delegated:
            open(os.path.join(path, "memory.max"), "w").write("max\n")

    def rmdir(self, path):
        if not self._inside(path):
            return self._rmdir(path)
        if any(os.path.isdir(os.path.join(path, n)) for n in os.listdir(path)) or os.path.exists(f"{path}/.busy"):
            raise OSError(16, "Device or resource busy", path)
        for n in os.listdir(path):
            os.unlink(os.path.join(path, n))
        self._rmdir(path)

    def write(self, path, text):
        d, name = os.path.split(path)
        if name == "cgroup.subtree_control" and self._inside(path):
            if os.path.exists(os.path.join(d, ".busy")):  # no internal processes: refuse controllers for children
                raise OSError(16, "Device or resource busy", path)
            words = cgroups._read_words(path)
            for word in text.split():
                ctl = word.lstrip("+")
                if ctl not in cgroups._read_words(os.path.join(d, "cgroup.controllers")):
                    raise OSError(2, "No such file or directory", path)
                words.append(ctl)
            with open(path, "w") as f:
                f.write(" ".join(dict.fromkeys(words)))
            return
        with open(path, "w") as f:
            f.write(text)


@pytest.fixture
def fs(tmp_path, monkeypatch):
    fake = FakeCgroupFS(tmp_path / "cg", monkeypatch)
    fake.cgroup("", subtree=("cpu", "memory"))
    monkeypatch.setattr(cgroups, "_cgroup_mounts", lambda: (fake.root, {}))
    return fake


def _own(monkeypatch, rel):
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"": "/" + rel})


def test_nearest_ancestor_that_delegates_memory(tmp_path):
    root = tmp_path / "cg"
    for rel, subtree in (("", "cpu memory"), ("a", "memory"), ("a/b", "cpu"), ("a/b/own", "")):
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel / "cgroup.subtree_control").write_text(subtree)
    own = str(root / "a/b/own")
    assert cgroups.nearest_memory_ancestor(str(root), own) == str(root / "a")  # b gives cpu only
    (root / "a/b/cgroup.subtree_control").write_text("cpu memory")
    assert cgroups.nearest_memory_ancestor(str(root), own) == str(root / "a/b")  # the nearest, not a farther one
    assert cgroups.nearest_memory_ancestor(str(root), str(root)) is None  # the mount's root has no ancestor here
    assert cgroups.nearest_memory_ancestor(str(root), str(tmp_path / "elsewhere/x")) is None
    for rel in ("", "a", "a/b"):
        (root / rel / "cgroup.subtree_control").write_text("cpu")
    assert cgroups.nearest_memory_ancestor(str(root), own) is None


def test_slots_of_a_busy_cgroup_get_memory_under_a_parent_made_next_to_it(fs, monkeypatch):
    fs.cgroup("process_api", subtree=("memory",))
    own = fs.cgroup("process_api/abc", controllers=("memory",), busy=True)  # holds the trainer's processes
    _own(monkeypatch, "process_api/abc")
    slots = [cgroups.SlotCgroup(f"mrgrpo-slot-{i}") for i in range(2)]
    parent = os.path.join(fs.root, "process_api", f"mrgrpo-sandbox-{os.getpid()}")
    for i, cg in enumerate(slots):
        assert cg.auto_parent == parent
        assert cg.mem == (os.path.join(parent, f"mrgrpo-slot-{i}"), "v2")
        assert cg.cpu == (os.path.join(parent, f"mrgrpo-slot-{i}", "cpu.stat"), "v2")
    assert "memory" in cgroups._read_words(os.path.join(parent, "cgroup.subtree_control"))
    assert not [n for n in os.listdir(own) if os.path.isdir(os.path.join(own, n))]  # nothing made under ours
    assert slots[0].remove() and os.path.isdir(parent)  # the other slot still uses the parent
    assert slots[1].remove() and not os.path.exists(parent)  # the last slot takes it away


def test_a_cgroup_that_can_delegate_memory_stays_the_parent(fs, monkeypatch):
    own = fs.cgroup("svc/own", controllers=("cpu", "memory"))  # no processes of its own: it can delegate
    fs.cgroup("svc", subtree=("memory",))
    _own(monkeypatch, "svc/own")
    cg = cgroups.SlotCgroup("mrgrpo-slot-0")
    assert cg.auto_parent is None and cg.mem == (os.path.join(own, "mrgrpo-slot-0"), "v2")


def test_a_prepared_parent_wins_and_no_auto_parent_is_made(fs, monkeypatch):
    fs.cgroup("process_api", subtree=("memory",))
    fs.cgroup("process_api/abc", controllers=("memory",), busy=True)
    prepared = fs.cgroup("mrgrpo", subtree=("memory",))
    _own(monkeypatch, "process_api/abc")
    cg = cgroups.SlotCgroup("mrgrpo-slot-0", v2_parent=prepared)
    assert cg.auto_parent is None and cg.mem == (os.path.join(prepared, "mrgrpo-slot-0"), "v2")
    assert not [n for n in os.listdir(os.path.join(fs.root, "process_api")) if n.startswith("mrgrpo-sandbox-")]


def test_without_a_delegating_ancestor_cpu_accounting_stays_and_nothing_is_left(fs, monkeypatch):
    fs.cgroup("", subtree=("cpu",))  # the root gives no memory either (and a container's root has no ancestor)
    fs.cgroup("process_api", subtree=("cpu",))
    own = fs.cgroup("process_api/abc", controllers=("cpu", "memory"), busy=True)
    _own(monkeypatch, "process_api/abc")
    cg = cgroups.SlotCgroup("mrgrpo-slot-0")
    assert cg.auto_parent is None and cg.mem is None
    assert cg.cpu == (os.path.join(own, "mrgrpo-slot-0", "cpu.stat"), "v2")
    assert not [n for n in os.listdir(os.path.join(fs.root, "process_api")) if n.startswith("mrgrpo-sandbox-")]


def test_a_parent_that_cannot_delegate_memory_is_removed_again(fs, monkeypatch):
    fs.cgroup("process_api", subtree=("memory",))
    fs.cgroup("process_api/abc", controllers=("memory",), busy=True)
    _own(monkeypatch, "process_api/abc")

    def refuse(path, text):  # e.g. a read-only or policed hierarchy: +memory on our new parent is refused
        if os.path.basename(os.path.dirname(path)).startswith("mrgrpo-sandbox-"):
            raise OSError(13, "Permission denied", path)
        fs.write(path, text)

    monkeypatch.setattr(cgroups, "_write", refuse)
    assert cgroups.auto_memory_parent(fs.root, os.path.join(fs.root, "process_api/abc")) is None
    assert not [n for n in os.listdir(os.path.join(fs.root, "process_api")) if n.startswith("mrgrpo-sandbox-")]


def test_the_opt_out_keeps_our_own_cgroup(fs, monkeypatch):
    fs.cgroup("process_api", subtree=("memory",))
    own = fs.cgroup("process_api/abc", controllers=("memory",), busy=True)
    _own(monkeypatch, "process_api/abc")
    cg = cgroups.SlotCgroup("mrgrpo-slot-0", disable=("cgroup_auto_parent",))
    assert cg.auto_parent is None and cg.mem is None and cg.cpu[0].startswith(own)


def test_stale_parents_of_gone_processes_are_removed_and_live_ones_kept(fs, monkeypatch):
    fs.cgroup("process_api", subtree=("memory",))
    fs.cgroup("process_api/abc", controllers=("memory",), busy=True)
    dead = fs.cgroup("process_api/mrgrpo-sandbox-999999999", subtree=("memory",))
    fs.cgroup("process_api/mrgrpo-sandbox-999999999/mrgrpo-slot-3")
    busy_dead = fs.cgroup("process_api/mrgrpo-sandbox-999999998")
    fs.cgroup("process_api/mrgrpo-sandbox-999999998/mrgrpo-slot-4", busy=True)  # a process still in it: kept
    live = fs.cgroup(f"process_api/mrgrpo-sandbox-{os.getppid()}")
    other = fs.cgroup("process_api/mrgrpo-sandbox-notapid")
    _own(monkeypatch, "process_api/abc")
    cg = cgroups.SlotCgroup("mrgrpo-slot-0")
    assert cg.mem is not None
    assert not os.path.exists(dead) and os.path.isdir(busy_dead) and os.path.isdir(live) and os.path.isdir(other)


class _Recorded(Exception):
    pass


@pytest.mark.parametrize("env, expect", [({}, False), ({"MRGRPO_SANDBOX_CGROUP_AUTO_PARENT": "0"}, True),
                                         ({"MRGRPO_SANDBOX_CGROUP_AUTO_PARENT": "1"}, False)])
def test_the_pool_passes_the_opt_out_from_the_environment(tmp_path, monkeypatch, env, expect):
    from mrgrpo.sandbox import pool as pool_mod

    seen = []

    def record(name, disable=(), v2_parent=None):
        seen.append(disable)
        raise _Recorded

    monkeypatch.delenv("MRGRPO_SANDBOX_CGROUP_AUTO_PARENT", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(pool_mod.cgroups, "SlotCgroup", record)
    monkeypatch.setattr(pool_mod.os, "geteuid", lambda: 1000)  # no node-wide uid lease for this
    with pytest.raises(_Recorded):
        pool_mod.Slot(0, str(tmp_path)).start()
    assert ("cgroup_auto_parent" in seen[0]) is expect
