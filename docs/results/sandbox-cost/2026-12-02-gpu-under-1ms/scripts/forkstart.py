import ctypes, os, sys, time, resource, gc, json
for name in json.loads(sys.argv[1]): __import__(name)
fork = ctypes.CDLL(None, use_errno=True).fork
gc.freeze()
res = []
for i in range(300):
    r, w = os.pipe()
    pid = fork()
    if pid == 0:
        t = time.thread_time_ns(); f = resource.getrusage(0).ru_minflt
        os.write(w, f"{t} {f}".encode()); os._exit(0)
    os.close(w); d = os.read(r, 100); os.close(r); os.waitpid(pid, 0)
    res.append([int(x) for x in d.split()])
res = res[30:]
print("child start: thread CPU us", sorted(x[0] for x in res)[len(res)//2] / 1e3, "faults", sum(x[1] for x in res)/len(res))
