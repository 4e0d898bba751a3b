import os, sys, time
from mrgrpo.sandbox import Job, run, shutdown
def desc(pid):
    out=[]
    for p in filter(str.isdigit, os.listdir('/proc')):
        try:
            st=open(f'/proc/{p}/stat').read().rsplit(')',1)[1].split()
        except OSError: continue
        if int(st[1])==pid: out.append(int(p)); out+=desc(int(p))
    return out
def stat(p):
    st=open(f'/proc/{p}/stat').read().rsplit(')',1)[1].split()
    return int(st[7]), int(st[8]), int(st[11])+int(st[12]), int(st[13])+int(st[14])  # minflt cminflt utime+stime cutime+cstime
code = sys.argv[2] if len(sys.argv) > 2 else "print(input())"
n=int(sys.argv[1])
import os as _o
from mrgrpo.sandbox import pool as _p
_p.DISABLE.update(filter(None, _o.environ.get("DIS","").split(",")))
run(Job(code=code, inputs=["x"], outputs=["x"]))
procs=desc(os.getpid())
a={p:stat(p) for p in procs}
run(Job(code=code, inputs=["x"]*n, outputs=["x"]*n))
b={p:stat(p) for p in procs}
for p in procs:
    d=[ (y-x)/n for x,y in zip(a[p],b[p])]
    print(p, open(f'/proc/{p}/cmdline').read()[:30].replace('\0',' '), f"minflt {d[0]:.1f} cminflt {d[1]:.1f} cpu {d[2]*10:.3f}ms ccpu {d[3]*10:.3f}ms")
shutdown()
