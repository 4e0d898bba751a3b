import json, os, subprocess, sys, tempfile, time, statistics
W = r'''
import json, sys, time, threading
from mrgrpo.sandbox.admission import get_admission
T, hold, gap, dur = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
import os
if os.environ.get('LOCAL'):
    sem = threading.BoundedSemaphore(2)
    class L:
        def acquire(self): sem.acquire(); return 0
        def release(self, fd): sem.release()
    adm = L()
else:
    adm = get_admission()
waits = []; lock = threading.Lock()
end = time.monotonic() + dur
def loop():
    mine = []
    while time.monotonic() < end:
        t = time.monotonic(); fd = adm.acquire(); mine.append(time.monotonic() - t)
        time.sleep(hold); adm.release(fd); time.sleep(gap)
    with lock: waits.extend(mine)
ts = [threading.Thread(target=loop) for _ in range(T)]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps(waits))
'''
P, T, slots, hold, gap, dur = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
with tempfile.TemporaryDirectory() as d:
    env = dict(os.environ, MRGRPO_SANDBOX_SLOTS=str(slots), MRGRPO_SANDBOX_ADMISSION_DIR=d)
    t0 = time.monotonic(); c0 = os.times()
    ps = [subprocess.Popen([sys.executable, "-c", W, str(T), str(hold), str(gap), str(dur)], stdout=subprocess.PIPE, env=env, text=True) for _ in range(P)]
    w = []
    for p in ps: w += json.loads(p.communicate()[0])
    wall = time.monotonic() - t0; c1 = os.times()
w.sort(); n = len(w)
cpu = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
print(f"P={P} T={T} slots={slots} n={n} rate={n/wall:.0f}/s mean={statistics.mean(w)*1e3:.1f}ms p50={w[n//2]*1e3:.1f} p99={w[int(.99*n)]*1e3:.1f} p999={w[int(.999*n)]*1e3:.1f} max={w[-1]*1e3:.0f}ms cpu/acq={cpu/n*1e6:.0f}us")
