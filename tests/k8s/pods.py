#!/usr/bin/env python3
"""Runs the pods of Kubernetes Job manifests on this machine, as the kubelet
would start their containers, and checks what the API server would refuse
beyond the schema. Used by tests/k8s/run.sh.

  pods.py selftest
      The $(VAR) expansion and the resource arithmetic against cases
      taken from Kubernetes' own rules.

  pods.py lint --bin BIN MANIFEST...
      Checks the schema cannot express: the API server's validation of Job
      specs (podFailurePolicy, backoffLimitPerIndex, resources), the file's
      consistency (completions == CHESSBENCH_SHARD_COUNT, one grid and run
      for all ablate Jobs, paths on the volume, the Jobs its comments'
      kubectl commands name) and that every environment variable is used:
      referenced as $(VAR) by the command line, or read by the binary.

  pods.py show MANIFEST
      The Jobs as JSON: name, component label, completions, args, env.

  pods.py run MANIFEST --job NAME --volume NAME=DIR --bin BIN --engine ENGINE
             --logs DIR [overrides...]
      Runs pods 0 .. completions-1 (Indexed) or one pod (NonIndexed) of the
      Job, at most `parallelism` at once, in index order: the container's
      command and args with its env resolved (value, valueFrom.
      resourceFieldRef of requests.cpu / limits.cpu with divisor; anything
      else is refused), $(VAR) expanded as the kubelet does ($$ escapes, an
      unknown variable stays as written), JOB_COMPLETION_INDEX set as the
      Job controller does, in a clean environment whose PATH holds
      `chessbench` (BIN) and `stockfish` (ENGINE), like the image. Paths
      under each volume's mountPath, in args and env values, are mapped to
      the host directory given with --volume. Each pod's stdout and stderr
      go to LOGS/JOB-I.out and LOGS/JOB-I.err, its exit status to
      LOGS/JOB-I.exit, its command line and env to LOGS/JOB-I.json. Exits 1
      when a pod failed.
      Overrides, each printed:
        --completions N     spec.completions and CHESSBENCH_SHARD_COUNT (which
                            must equal completions) become N, parallelism
                            min(parallelism, N)
        --cpu Q             the container's requests.cpu and limits.cpu
        --replace-arg='A -> B'  the argument A (exactly once in args) becomes B
        --add-arg=A         appended to args (repeatable)
        --index I           run only pod I (repeatable): a retried pod
Not emulated: retries (a failed pod fails the run), podFailurePolicy,
resource limits, other pods' interference beyond the shared directory.
"""

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from decimal import ROUND_CEILING, Decimal

import yaml


class Unsupported(Exception):
    """Something in a manifest this harness cannot run faithfully."""


# --- Kubernetes rules ------------------------------------------------------


def expand(text, *contexts):
    """Kubernetes' $(VAR) expansion (third_party/forked/golang/expansion):
    $(NAME) becomes the value of NAME in the first context that has it,
    an unknown NAME stays $(NAME), $$ is a literal $, a $ before anything
    else (or an unterminated $( ) is kept."""

    def mapping(name):
        for ctx in contexts:
            if name in ctx:
                return ctx[name]
        return "$(" + name + ")"

    out = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                read, is_var, advance = "$", False, 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close >= 1:
                    read, is_var, advance = rest[1:close], True, close + 1
                else:
                    read, is_var, advance = "$(", False, 1
            else:
                read, is_var, advance = "$" + rest[0], False, 1
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def quantity(value):
    """A resource.Quantity ("16", "500m", "4Gi", "1e3") as a Decimal."""
    text = str(value).strip()
    m = re.fullmatch(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)", text)
    if not m:
        raise Unsupported(f"not a Kubernetes quantity: {value!r}")
    number, suffix = Decimal(m.group(1)), m.group(2)
    if suffix in _SUFFIX:
        return number * _SUFFIX[suffix]
    e = re.fullmatch(r"[eE]([+-]?[0-9]+)", suffix)
    if e:
        return number * Decimal(10) ** int(e.group(1))
    raise Unsupported(f"not a Kubernetes quantity: {value!r}")


def resource_field(container, ref, containers):
    """valueFrom.resourceFieldRef as the kubelet resolves it: for cpu,
    ceil(quantity / divisor) (an unset request defaults to the limit, as the
    API server defaults it). Only cpu: anything else is refused."""
    name = ref.get("containerName") or container["name"]
    target = next((c for c in containers if c["name"] == name), None)
    if target is None:
        raise Unsupported(f"resourceFieldRef names container {name!r}, not in the pod")
    resource = ref.get("resource")
    if resource not in ("requests.cpu", "limits.cpu"):
        raise Unsupported(f"resourceFieldRef resource {resource!r} (only requests.cpu, limits.cpu)")
    res = target.get("resources") or {}
    kind = resource.split(".")[0]
    value = (res.get(kind) or {}).get("cpu")
    if value is None and kind == "requests":
        value = (res.get("limits") or {}).get("cpu")
    if value is None:
        raise Unsupported(f"{resource} of {name!r} is not set (the node's allocatable would be used)")
    divisor = quantity(ref.get("divisor", "1"))
    if divisor <= 0:
        raise Unsupported(f"divisor {ref.get('divisor')!r}")
    # The kubelet: ceil(cpu.MilliValue() / divisor.MilliValue()).

    def milli(q):
        return (q * 1000).to_integral_value(rounding=ROUND_CEILING)

    return str(int((milli(quantity(value)) / milli(divisor)).to_integral_value(rounding=ROUND_CEILING)))


def resolve_env(container, containers, injected):
    """The container's environment as the kubelet builds it: in order, each
    `value` expanded against the variables before it, each valueFrom
    resolved; then the variables the Job controller adds (injected)."""
    if container.get("envFrom"):
        raise Unsupported("envFrom")
    env = {}
    for var in container.get("env") or []:
        name = var["name"]
        if name in injected:
            raise Unsupported(f"env {name} is set by Kubernetes; the manifest must not set it")
        if "valueFrom" in var:
            src = var["valueFrom"]
            if set(src) != {"resourceFieldRef"}:
                raise Unsupported(f"env {name}: valueFrom {sorted(src)} (only resourceFieldRef)")
            env[name] = resource_field(container, src["resourceFieldRef"], containers)
        else:
            env[name] = expand(str(var.get("value", "")), env)
    env.update(injected)
    return env


# --- Manifests -------------------------------------------------------------


def load(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    for d in docs:
        if d.get("kind") != "Job" or d.get("apiVersion") != "batch/v1":
            raise Unsupported(f"{path}: {d.get('apiVersion')} {d.get('kind')}: only batch/v1 Jobs")
    return docs


def the_container(job):
    spec = job["spec"]["template"]["spec"]
    for key in ("initContainers", "ephemeralContainers"):
        if spec.get(key):
            raise Unsupported(f"{job['metadata']['name']}: {key}")
    containers = spec["containers"]
    if len(containers) != 1:
        raise Unsupported(f"{job['metadata']['name']}: {len(containers)} containers (one expected)")
    return containers[0], containers


def env_value(container, name):
    for var in container.get("env") or []:
        if var["name"] == name:
            return var.get("value")
    return None


def indexed(job):
    return job["spec"].get("completionMode") == "Indexed"


def component(job):
    return (job["metadata"].get("labels") or {}).get("app.kubernetes.io/component")


# --- lint -------------------------------------------------------------------


def lint(paths, binary, verbose=False):
    with open(binary, "rb") as f:
        strings = f.read()
    problems = []
    passed = [0]

    def check(ok, what):
        if verbose or not ok:
            print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if ok:
            passed[0] += 1
        else:
            problems.append(what)

    for path in paths:
        jobs = load(path)
        text = open(path).read()
        names = {j["metadata"]["name"] for j in jobs}
        print(f"{path}: {len(jobs)} Job(s): {', '.join(sorted(names))}")
        for job in jobs:
            name = job["metadata"]["name"]
            spec = job["spec"]
            pod = spec["template"]["spec"]
            container, containers = the_container(job)
            cnames = {c["name"] for c in containers}
            p = f"{name}:"
            check(container.get("command") == ["chessbench"], f"{p} command is [chessbench]")
            completions = spec.get("completions")
            shard_count = env_value(container, "CHESSBENCH_SHARD_COUNT")
            if indexed(job):
                check(isinstance(completions, int) and completions > 0, f"{p} Indexed with completions set ({completions})")
                check(shard_count is not None and str(shard_count) == str(completions),
                      f"{p} CHESSBENCH_SHARD_COUNT ({shard_count}) == completions ({completions})")
            else:
                check(shard_count is None, f"{p} NonIndexed: no CHESSBENCH_SHARD_COUNT (no JOB_COMPLETION_INDEX to go with it)")
            # The API server's Job validation (pkg/apis/batch/validation).
            bopi = spec.get("backoffLimitPerIndex")
            if bopi is not None:
                check(indexed(job), f"{p} backoffLimitPerIndex needs completionMode Indexed")
            mfi = spec.get("maxFailedIndexes")
            if mfi is not None:
                check(bopi is not None, f"{p} maxFailedIndexes needs backoffLimitPerIndex")
                check(completions is not None and mfi <= completions,
                      f"{p} maxFailedIndexes ({mfi}) <= completions ({completions})")
            pfp = spec.get("podFailurePolicy")
            if pfp:
                check(pod.get("restartPolicy") == "Never", f"{p} podFailurePolicy needs restartPolicy Never")
                for i, rule in enumerate(pfp.get("rules") or []):
                    r = f"{p} podFailurePolicy rule {i} ({rule.get('action')})"
                    check(rule.get("action") in ("FailJob", "FailIndex", "Ignore", "Count"), f"{r}: a known action")
                    if rule.get("action") == "FailIndex":
                        check(bopi is not None, f"{r}: FailIndex needs backoffLimitPerIndex")
                    check(("onExitCodes" in rule) != ("onPodConditions" in rule), f"{r}: one of onExitCodes, onPodConditions")
                    codes = rule.get("onExitCodes")
                    if codes:
                        values = codes.get("values") or []
                        check(codes.get("containerName", container["name"]) in cnames, f"{r}: containerName is a container")
                        check(codes.get("operator") in ("In", "NotIn"), f"{r}: operator In or NotIn")
                        check(values == sorted(set(values)) and len(values) > 0, f"{r}: values {values} ordered and unique")
                        if codes.get("operator") == "In":
                            check(0 not in values, f"{r}: no 0 with In")
                    for cond in rule.get("onPodConditions") or []:
                        check(cond.get("status") in ("True", "False", "Unknown"),
                              f"{r}: onPodConditions {cond.get('type')} has a status (required up to 1.34)")
            for c in containers:
                res = c.get("resources") or {}
                req, lim = res.get("requests") or {}, res.get("limits") or {}
                for key in sorted(set(req) | set(lim)):
                    if key in req and key in lim:
                        check(quantity(req[key]) <= quantity(lim[key]), f"{p} {key}: request <= limit")
                    if "/" in key and not key.startswith(("kubernetes.io/", "hugepages-")):
                        check(req.get(key) is not None and str(req.get(key)) == str(lim.get(key)),
                              f"{p} {key}: an extended resource, request == limit")
            # The command line and its environment.
            line = " ".join((container.get("command") or []) + [str(a) for a in container.get("args") or []])
            for var in container.get("env") or []:
                used = f"$({var['name']})" in line
                read = var["name"].encode() in strings
                check(used or read, f"{p} env {var['name']}: "
                      + ("referenced by the command line" if used else "read by the binary" if read
                         else "neither referenced by the command line nor named in the binary"))
                ref = (var.get("valueFrom") or {}).get("resourceFieldRef")
                if ref:
                    check(ref.get("containerName", container["name"]) in cnames,
                          f"{p} env {var['name']}: resourceFieldRef names a container")
            mounts = [m["mountPath"].rstrip("/") for m in container.get("volumeMounts") or []]
            volumes = {v["name"] for v in pod.get("volumes") or []}
            for m in container.get("volumeMounts") or []:
                check(m["name"] in volumes, f"{p} volumeMount {m['name']} is a volume")
            for a in container.get("args") or []:
                a = str(a).split("=", 1)[-1]
                if a.startswith("/"):
                    check(any(a == m or a.startswith(m + "/") for m in mounts), f"{p} path {a} is on a mounted volume")
        # One grid and one run directory for all ablate Jobs of the file, and
        # for the `chessbench ablate` commands of its comments.
        comments = "\n".join(l.lstrip()[1:] for l in text.splitlines() if l.lstrip().startswith("#"))
        comments = re.sub(r"\\\n\s*", " ", comments)  # join continued lines
        targets = {tuple(the_container(j)[0]["args"][1:3]) for j in jobs
                   if (the_container(j)[0].get("args") or [None])[0] == "ablate"}
        targets |= set(re.findall(r"chessbench ablate (/\S+) (/\S+)", comments))
        if targets:
            check(len(targets) == 1, f"{path}: the ablate Jobs and comments name one grid and run: {sorted(targets)}")
        # The kubectl commands of the comments: Jobs of this file, no
        # `kubectl run` pod (it mounts no volume) given a path on the volume.
        mount_paths = {m["mountPath"].rstrip("/") for j in jobs for m in the_container(j)[0].get("volumeMounts") or []}
        for cmd in re.findall(r"kubectl run [^\n]*", comments):
            check(not any(mp + "/" in cmd for mp in mount_paths),
                  f"{path}: `{cmd.strip()}` uses the volume, which a kubectl run pod does not mount")
        selectors = re.findall(r"kubectl apply -f \S+ -l (\S+)=(\S+)", comments)
        for key, value in selectors:
            hit = [j["metadata"]["name"] for j in jobs if (j["metadata"].get("labels") or {}).get(key) == value]
            check(len(hit) == 1, f"{path}: `kubectl apply -l {key}={value}` selects one Job ({hit})")
        if selectors:
            check({component(j) for j in jobs} <= {v for _, v in selectors},
                  f"{path}: every Job is applied by a comment's kubectl apply -l")
        for ref in set(re.findall(r"job[/ ]([a-z0-9][a-z0-9-]*)", comments)) | set(re.findall(r"job-name=([a-z0-9-]+)", comments)):
            if ref.startswith("chessbench"):
                check(ref in names, f"{path}: the comments' job {ref} is a Job of the file")
    print(f"  lint: {passed[0]} passed, {len(problems)} failed")
    return problems


# --- run --------------------------------------------------------------------


def run(args):
    jobs = {j["metadata"]["name"]: j for j in load(args.manifest)}
    if args.job not in jobs:
        raise SystemExit(f"no Job {args.job} in {args.manifest} ({', '.join(jobs)})")
    job = jobs[args.job]
    spec = job["spec"]
    container, containers = the_container(job)
    if container.get("command") != ["chessbench"]:
        raise Unsupported(f"command {container.get('command')} (expected [chessbench])")
    if container.get("workingDir"):
        raise Unsupported("workingDir")

    def note(what):
        print(f"  override: {what}")

    completions = spec.get("completions", 1) if indexed(job) else 1
    parallelism = spec.get("parallelism", 1)
    if args.completions is not None:
        if not indexed(job):
            raise SystemExit("--completions: not an Indexed Job")
        old = env_value(container, "CHESSBENCH_SHARD_COUNT")
        if old is None or str(old) != str(completions):
            raise SystemExit(f"CHESSBENCH_SHARD_COUNT {old} != completions {completions}")
        note(f"completions {completions} -> {args.completions}, CHESSBENCH_SHARD_COUNT "
             f"{old} -> {args.completions}, parallelism {parallelism} -> {min(parallelism, args.completions)}")
        completions = args.completions
        parallelism = min(parallelism, completions)
        for var in container["env"]:
            if var["name"] == "CHESSBENCH_SHARD_COUNT":
                var["value"] = str(completions)
    if args.cpu is not None:
        res = container.setdefault("resources", {})
        note(f"requests.cpu {res.get('requests', {}).get('cpu')} -> {args.cpu}, "
             f"limits.cpu {res.get('limits', {}).get('cpu')} -> {args.cpu}")
        res.setdefault("requests", {})["cpu"] = args.cpu
        res.setdefault("limits", {})["cpu"] = args.cpu
    argv = [str(a) for a in container.get("args") or []]
    for pair in args.replace_arg:
        if " -> " not in pair:
            raise SystemExit(f"--replace-arg {pair!r}: expected 'OLD -> NEW'")
        old, new = pair.split(" -> ", 1)
        if argv.count(old) != 1:
            raise SystemExit(f"--replace-arg {old}: in args {argv.count(old)} times, not once")
        argv[argv.index(old)] = new
        note(f"arg {old} -> {new}")
    if args.add_arg:
        note(f"args += {' '.join(args.add_arg)}")
        argv += args.add_arg

    # Volumes: mountPath -> host directory.
    hostdirs = dict(v.split("=", 1) for v in args.volume)
    mounts = []
    for m in container.get("volumeMounts") or []:
        if m.get("subPath") or m.get("subPathExpr"):
            raise Unsupported("volumeMount subPath")
        if m["name"] not in hostdirs:
            raise SystemExit(f"volume {m['name']} (at {m['mountPath']}) has no --volume {m['name']}=DIR")
        mounts.append((m["mountPath"].rstrip("/"), os.path.abspath(hostdirs[m["name"]])))

    def host_path(s):
        key, eq, val = s.partition("=") if s.startswith("-") and "=" in s else ("", "", s)
        for mp, host in mounts:
            if val == mp or val.startswith(mp + "/"):
                val = host + val[len(mp):]
                break
        return key + eq + val

    # The image: chessbench and stockfish on PATH.
    os.makedirs(args.logs, exist_ok=True)
    image = tempfile.mkdtemp(prefix=f"{args.job}.image-bin.", dir=args.logs)
    os.symlink(os.path.abspath(args.bin), os.path.join(image, "chessbench"))
    os.symlink(os.path.abspath(args.engine), os.path.join(image, "stockfish"))

    indexes = args.index if args.index else list(range(completions))
    if any(not 0 <= i < completions for i in indexes):
        raise SystemExit(f"--index {indexes}: outside 0..{completions - 1}")
    pending = list(indexes)
    running = {}
    failed = []
    t0 = time.time()
    print(f"  {args.job}: {len(indexes)} pod(s), {parallelism} at once")

    # Orphans (a pod's engines when the pod ends first) become this
    # process's children, to be reaped here, not left as zombies.
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass

    def stop(signum, _frame):
        # Stopped (the test's cleanup): end the pods this process started,
        # each a process group (its container), engines included.
        for proc, *_ in running.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 5
        while time.time() < deadline:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    time.sleep(0.05)
            except ChildProcessError:
                break
        else:
            for proc, *_ in running.values():
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while pending or running:
        while pending and len(running) < parallelism:
            i = pending.pop(0)
            injected = {"JOB_COMPLETION_INDEX": str(i)} if indexed(job) else {}
            env = resolve_env(container, containers, injected)
            cmd = [expand(a, env) for a in container["command"] + argv]
            cmd = [cmd[0]] + [host_path(a) for a in cmd[1:]]
            env = {k: host_path(v) for k, v in env.items()}
            cwd = os.path.join(args.logs, f"{args.job}-{i}.cwd")
            os.makedirs(cwd, exist_ok=True)
            pod_env = {
                "PATH": image + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": cwd,
                "HOSTNAME": f"{args.job}-{i}-x" if indexed(job) else f"{args.job}-x",
                **env,
            }
            shown = " ".join(f"{k}={v}" for k, v in env.items())
            print(f"  pod {i}: {shown} {shlex.join(cmd)}", flush=True)
            with open(os.path.join(args.logs, f"{args.job}-{i}.json"), "w") as f:
                json.dump({"index": i, "argv": cmd, "env": env}, f)
            out = open(os.path.join(args.logs, f"{args.job}-{i}.out"), "w")
            err = open(os.path.join(args.logs, f"{args.job}-{i}.err"), "w")
            running[i] = (subprocess.Popen(cmd, env=pod_env, cwd=cwd, stdout=out, stderr=err,
                                           stdin=subprocess.DEVNULL, start_new_session=True),
                          out, err, time.time())
        time.sleep(0.05)
        for i, (proc, out, err, started) in list(running.items()):
            if proc.poll() is None:
                continue
            out.close()
            err.close()
            del running[i]
            print(f"  pod {i}: exit status {proc.returncode} after {time.time() - started:.1f} s", flush=True)
            with open(os.path.join(args.logs, f"{args.job}-{i}.exit"), "w") as f:
                print(proc.returncode, file=f)
            if proc.returncode != 0:
                failed.append(i)
                with open(err.name) as f:
                    print("    " + "    ".join(f.readlines()[-15:]))
    while True:  # reap orphans, if any
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break
    print(f"  {args.job}: {len(indexes) - len(failed)} of {len(indexes)} pod(s) succeeded in {time.time() - t0:.1f} s")
    return 1 if failed else 0


# --- selftest ---------------------------------------------------------------


def selftest():
    env = {"A": "x", "JOBS": "16"}
    cases = [
        ("--jobs=$(JOBS)", "--jobs=16"),
        ("$(A)$(A)", "xx"),
        ("$$(A)", "$(A)"),            # escaped
        ("$$$(A)", "$x"),
        ("$(UNKNOWN)", "$(UNKNOWN)"),  # left as written
        ("$(A", "$(A"),                # unterminated
        ("a$b", "a$b"),
        ("cost$", "cost$"),
        ("$()", "$()"),
        ("", ""),
    ]
    bad = [(i, expand(i, env), o) for i, o in cases if expand(i, env) != o]
    c = {"name": "c", "resources": {"requests": {"cpu": "16"}, "limits": {"cpu": "16"}}}
    res = [
        (resource_field(c, {"resource": "requests.cpu", "divisor": "1"}, [c]), "16"),
        (resource_field(c, {"resource": "requests.cpu"}, [c]), "16"),
        (resource_field(c, {"resource": "requests.cpu", "divisor": "1m"}, [c]), "16000"),
        (resource_field(c, {"resource": "requests.cpu", "divisor": "3"}, [c]), "6"),
    ]
    c2 = {"name": "c", "resources": {"limits": {"cpu": "1500m"}}}
    res.append((resource_field(c2, {"resource": "requests.cpu", "divisor": "1"}, [c2]), "2"))
    c3 = {"name": "c", "resources": {"requests": {"cpu": "250m"}}}
    res.append((resource_field(c3, {"resource": "requests.cpu", "divisor": "1"}, [c3]), "1"))
    bad += [("resourceFieldRef", got, want) for got, want in res if got != want]
    order = resolve_env({"name": "c", "env": [
        {"name": "B", "value": "$(A)-$(C)"}, {"name": "A", "value": "a"}, {"name": "C", "value": "$(A)"}]}, [], {})
    if order != {"B": "$(A)-$(C)", "A": "a", "C": "a"}:
        bad.append(("env order", order, "only earlier variables expand"))
    refused = 0
    for var in ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}},
                {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "JOB_COMPLETION_INDEX", "value": "0"}):
        try:
            resolve_env({"name": "c", "env": [var], **c}, [c], {"JOB_COMPLETION_INDEX": "0"})
        except Unsupported:
            refused += 1
    if refused != 4:
        bad.append(("unsupported env", refused, "4 refused"))
    for got in bad:
        print(f"  FAIL {got[0]!r}: got {got[1]!r}, want {got[2]!r}")
    print(f"  selftest: {len(cases) + len(res) + 2 - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("selftest")
    p = sub.add_parser("lint")
    p.add_argument("--bin", required=True)
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("manifests", nargs="+")
    p = sub.add_parser("show")
    p.add_argument("manifest")
    p = sub.add_parser("run")
    p.add_argument("manifest")
    p.add_argument("--job", required=True)
    p.add_argument("--volume", action="append", default=[], metavar="NAME=DIR")
    p.add_argument("--bin", required=True)
    p.add_argument("--engine", required=True)
    p.add_argument("--logs", required=True)
    p.add_argument("--completions", type=int)
    p.add_argument("--cpu")
    p.add_argument("--replace-arg", action="append", default=[], metavar="'OLD -> NEW'")
    p.add_argument("--add-arg", action="append", default=[])
    p.add_argument("--index", type=int, action="append", default=[])
    args = ap.parse_args()
    try:
        if args.cmd == "selftest":
            return selftest()
        if args.cmd == "lint":
            problems = lint(args.manifests, args.bin, args.verbose)
            return 1 if problems else 0
        if args.cmd == "show":
            out = []
            for j in load(args.manifest):
                c, _ = the_container(j)
                out.append({"name": j["metadata"]["name"], "component": component(j),
                            "indexed": indexed(j), "completions": j["spec"].get("completions"),
                            "parallelism": j["spec"].get("parallelism"),
                            "args": [str(a) for a in c.get("args") or []],
                            "env": {v["name"]: v.get("value") for v in c.get("env") or []}})
            json.dump(out, sys.stdout, indent=1)
            print()
            return 0
        return run(args)
    except Unsupported as e:
        print(f"error: unsupported by tests/k8s/pods.py: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
