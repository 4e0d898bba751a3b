"""Write an instrumented copy of worker.py: the test process records (minor faults, thread CPU ns) at each step of
its set-up and writes them to stderr before it exits. Usage: python3 instrument.py SRC DST"""
import sys
src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
s = s.replace("import warnings\n", "import warnings\nimport resource as _res\n_F = []\n\n\ndef _mf(tag):\n"
              "    _F.append((tag, _res.getrusage(0).ru_minflt, time.thread_time_ns()))\n", 1)
rep = [("    def _child(self, req, tmp, in_r, out_w, err_w, ctl_w, ready_w) -> None:\n        try:\n",
        "    def _child(self, req, tmp, in_r, out_w, err_w, ctl_w, ready_w) -> None:\n        _F.clear()\n"
        "        _mf('start')\n        try:\n"),
       ("    def _child(self, calls, req, ready_w) -> None:\n        try:\n",
        "    def _child(self, calls, req, ready_w) -> None:\n        _F.clear()\n        _mf('start')\n        try:\n"),
       ("                call(*args)\n", "                call(*args)\n            _mf('calls')\n"),
       ("            if self.cg is not None:\n                self.cg.join()\n",
        "            _mf('dup')\n            if self.cg is not None:\n                self.cg.join()\n            _mf('cg')\n"),
       ("                iso.unshare(iso.CLONE_NEWIPC)\n            ", "                iso.unshare(iso.CLONE_NEWIPC)\n"
        "            _mf('ipc')\n            "),
       ("            if self.ruleset is not None:\n                iso.restrict_self",
        "            _mf('rlim')\n            if self.ruleset is not None:\n                iso.restrict_self"),
       ("            os.chdir(tmp)\n", "            _mf('ll+uid')\n            os.chdir(tmp)\n"),
       ("            iso.close_fds_from(4)\n", "            iso.close_fds_from(4)\n            _mf('setup')\n"),
       ("    status, ctl = 0, _OK\n", "    _mf('prog0')\n    status, ctl = 0, _OK\n"),
       ("        try:\n            exec(code, main_module.__dict__)", "        _mf('main')\n        try:\n"
        "            exec(code, main_module.__dict__)"),
       ("    os._exit(status)\n\n\nif __name__", "    _mf('end')\n    os.write(2, ('F ' + ' '.join(f'{t}:{v}:{c}' "
        "for t, v, c in _F)).encode())\n    os._exit(status)\n\n\nif __name__")]
for a, b in rep:
    assert s.count(a) <= 1, a
    s = s.replace(a, b)
assert s.count("_mf(") >= 5
open(dst, "w").write(s)
