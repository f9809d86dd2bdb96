#!/usr/bin/env python3
"""Checks deploy/'s container and cluster files against the binaries this build made.

No Docker engine or Kubernetes cluster runs where CI does, so the files are checked for
what breaks them in practice: every command line they give qmm-server is run (ports moved
to free loopback ones, the CUDA backend swapped for the CPU one) and must start a server
that passes the health checks the files name; the image's runtime packages must provide
every shared library the binaries load; ports, probe ports, selectors, users and grace
periods must agree between the files and with the flags.

Run by ctest (tests/deploy/CMakeLists.txt) with QMM_SOURCE_DIR, QMM_BUILD_DIR,
QMM_SERVER_PATH and QMMCTL_PATH in the environment.
"""
import json
import os
import re
import shlex
import signal
import subprocess
import unittest

import yaml

SOURCE = os.environ["QMM_SOURCE_DIR"]
BUILD = os.environ["QMM_BUILD_DIR"]
SERVER = os.environ["QMM_SERVER_PATH"]
QMMCTL = os.environ["QMMCTL_PATH"]
DEPLOY = os.path.join(SOURCE, "deploy")
DOCKERFILE = os.path.join(DEPLOY, "docker", "Dockerfile")

# Packages every Debian image has (apt itself needs them), so the image need not list them.
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}
# Runtimes of a sanitizer build (QMM_SANITIZE), which no image is built as.
SANITIZER_RUNTIME = re.compile(r"lib(asan|ubsan|tsan|lsan)\.so")
# qmm-server's --shutdown_grace when none is given (server/main.cc).
DEFAULT_SHUTDOWN_GRACE_S = 20


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def flag(args, name):
    """The value of --name=VALUE in args, or None."""
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def seconds(duration):
    """'30s', '1m', '45' -> seconds."""
    m = re.fullmatch(r"(\d+)(s|m)?", str(duration))
    if not m:
        raise ValueError(f"unsupported duration {duration!r}")
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def shutdown_grace(args):
    value = flag(args, "shutdown_grace")
    return seconds(value) if value is not None else DEFAULT_SHUTDOWN_GRACE_S


class Server:
    """qmm-server run with a file's flags, on free loopback ports and the CPU backend."""

    def __init__(self, args):
        self.args = []
        for a in args:
            if a.startswith("--listen="):
                a = "--listen=127.0.0.1:0"
            elif a.startswith("--metrics_listen="):
                a = "--metrics_listen=127.0.0.1:0"
            elif a == "--backend=cuda":
                a = "--backend=cpu"
            self.args.append(a)

    def __enter__(self):
        self.proc = subprocess.Popen([SERVER] + self.args, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        # Notes (the CPU backend standing in for a missing GPU, say) may come first; the
        # line scripts wait for says where it listens. EOF: the server exited.
        seen = ""
        for line in self.proc.stdout:
            seen += line
            m = re.search(r"listening on (\S+) ", line)
            if m:
                self.address = m.group(1)
                return self
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        raise AssertionError(f"qmm-server {self.args} did not start:\n{seen}")

    def health(self, service=""):
        """qmmctl health's exit code and output."""
        r = subprocess.run([QMMCTL, f"--server={self.address}", "health", f"--service={service}"],
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout + r.stderr

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        output = self.proc.communicate(timeout=60)[0]
        self.proc.stdout.close()
        if exc[0] is None and self.proc.returncode != 0:
            raise AssertionError(f"qmm-server exited {self.proc.returncode} on SIGTERM:\n{output}")


class Dockerfile:
    """The stages of a Dockerfile: name -> {"from": base, "lines": [(KEYWORD, rest)]}."""

    def __init__(self, path):
        with open(path) as f:
            text = re.sub(r"\\\n", " ", f.read())
        self.stages = {}
        stage = None
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keyword, _, rest = line.partition(" ")
            keyword = keyword.upper()
            if keyword == "FROM":
                m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.IGNORECASE)
                stage = {"from": m.group(1), "lines": []}
                self.stages[m.group(2) or m.group(1)] = stage
            elif stage is not None:
                stage["lines"].append((keyword, rest.strip()))

    def lines(self, stage, keyword):
        return [rest for k, rest in self.stages[stage]["lines"] if k == keyword]

    def apt_packages(self, stage):
        """What the stage's RUN lines apt-get install (options left out)."""
        packages = []
        for run in self.lines(stage, "RUN"):
            for command in run.split("&&"):
                words = shlex.split(command)
                if words[:2] == ["apt-get", "install"]:
                    packages += [w for w in words[2:] if not w.startswith("-")]
        return packages

    def exec_form(self, stage, keyword):
        (rest,) = self.lines(stage, keyword)
        return json.loads(rest)


def loaded_libraries(binary):
    """The absolute paths of the shared libraries `binary` loads (ldd)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return [m.group(1) for m in re.finditer(r"=> (/\S+)", out)]


def debian_packages(paths):
    """{path: the Debian package that installed it, or None}, with one dpkg -S call. dpkg
    records a file under the path its package shipped, which usrmerge may have moved
    (/lib is /usr/lib), so each path is asked as it is, resolved and under /usr."""
    candidates = {p: [p, os.path.realpath(p), "/usr" + p] for p in paths}
    asked = sorted({c for cs in candidates.values() for c in cs})
    out = subprocess.run(["dpkg", "-S"] + asked, capture_output=True, text=True).stdout
    owner = {}
    for line in out.splitlines():
        package, _, path = line.partition(": ")
        owner[path] = package.split(",")[0].split(":")[0]
    return {p: next((owner[c] for c in cs if c in owner), None) for p, cs in candidates.items()}


class DockerfileTest(unittest.TestCase):
    def setUp(self):
        self.docker = Dockerfile(DOCKERFILE)

    def test_stages_pick_the_variant_by_build_arg(self):
        for stage in ("toolchain-OFF", "toolchain-ON", "build", "runtime-OFF", "runtime-ON",
                      "runtime"):
            self.assertIn(stage, self.docker.stages)
        self.assertEqual(self.docker.stages["build"]["from"], "toolchain-${QMM_CUDA}")
        self.assertEqual(self.docker.stages["runtime"]["from"], "runtime-${QMM_CUDA}")

    def test_build_runs_the_project_scripts_for_the_copied_binaries(self):
        (copy,) = self.docker.lines("toolchain-OFF", "COPY")
        script, copied = copy.split()
        self.assertEqual(script, "scripts/install-deps.sh")
        self.assertTrue(os.path.exists(os.path.join(SOURCE, script)))
        (install,) = self.docker.lines("toolchain-OFF", "RUN")
        self.assertTrue(install.startswith(f"bash {copied} "), install)
        (build,) = self.docker.lines("build", "RUN")
        self.assertIn("bash scripts/build.sh", build)
        (workdir,) = self.docker.lines("build", "WORKDIR")
        build_dir = re.search(r"QMM_BUILD_DIR=(\S+)", build).group(1)
        targets = re.search(r'QMM_BUILD_TARGETS="([^"]+)"', build).group(1).split()
        (copy,) = self.docker.lines("runtime", "COPY")
        sources = shlex.split(copy)[1:-1]
        self.assertEqual(shlex.split(copy)[0], "--from=build")
        # Each copied file is where the build puts that target, relative to its build dir.
        built = {os.path.basename(p): os.path.relpath(p, BUILD) for p in (SERVER, QMMCTL)}
        self.assertEqual(sorted(os.path.basename(s) for s in sources), sorted(built))
        self.assertEqual(sorted(targets), sorted(built))
        for s in sources:
            self.assertEqual(os.path.relpath(s, build_dir), built[os.path.basename(s)], s)
            self.assertTrue(os.path.dirname(s).startswith(workdir), s)

    def test_runtime_packages_provide_every_library_the_binaries_load(self):
        listed = set(self.docker.apt_packages("runtime-OFF")) | BASE_PACKAGES
        cuda_listed = self.docker.apt_packages("runtime-ON")
        libraries = {lib for binary in (SERVER, QMMCTL) for lib in loaded_libraries(binary)
                     if not SANITIZER_RUNTIME.match(os.path.basename(lib))}
        self.assertGreater(len(libraries), 10)
        debian = [lib for lib in libraries if not os.path.basename(lib).startswith("libcudart.")]
        owners = debian_packages(debian)
        for library in sorted(libraries):
            name = os.path.basename(library)
            with self.subTest(library=name):
                cudart = re.fullmatch(r"libcudart\.so\.(\d+)", name)
                if cudart:
                    # cuBLAS is dlopen'ed (kernels/cuda/cublas_api.cc), so ldd does not show
                    # it: the CUDA stage needs both, of the toolkit's major version.
                    major = cudart.group(1)
                    for wanted in (f"cuda-cudart-{major}-", f"libcublas-{major}-"):
                        self.assertTrue(any(p.startswith(wanted) for p in cuda_listed),
                                        f"runtime-ON installs no {wanted}*: {cuda_listed}")
                    continue
                self.assertIsNotNone(owners[library], f"no Debian package owns {library}")
                self.assertIn(owners[library], listed, f"{library} comes from {owners[library]}")

    def test_command_line_serves_and_the_healthcheck_passes(self):
        command = self.docker.exec_form("runtime", "CMD")
        self.assertEqual(self.docker.exec_form("runtime", "ENTRYPOINT"), ["qmm-server"])
        listen, metrics = flag(command, "listen"), flag(command, "metrics_listen")
        self.assertTrue(listen.startswith("0.0.0.0:"), "a container's loopback is its own")
        self.assertTrue(metrics.startswith("0.0.0.0:"))
        (expose,) = self.docker.lines("runtime", "EXPOSE")
        self.assertEqual(sorted(map(int, expose.split())), sorted([port_of(listen), port_of(metrics)]))
        healthcheck = self.docker.lines("runtime", "HEALTHCHECK")[0]
        probe = json.loads(healthcheck.split("CMD", 1)[1])
        self.assertEqual(probe[0], "qmmctl")
        self.assertEqual(flag(probe, "server"), f"127.0.0.1:{port_of(listen)}")
        self.assertEqual(probe[-1], "health")
        with Server(command) as server:
            args = [f"--server={server.address}" if a.startswith("--server=") else a
                    for a in probe[1:]]
            r = subprocess.run([QMMCTL] + args, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_runs_as_a_numeric_non_root_user(self):
        (user,) = self.docker.lines("runtime", "USER")
        uid, _, gid = user.partition(":")
        self.assertTrue(uid.isdigit() and int(uid) != 0, user)
        self.assertTrue(gid.isdigit() and int(gid) != 0, user)


class ComposeTest(unittest.TestCase):
    def setUp(self):
        self.compose = load_yaml(os.path.join(DEPLOY, "compose.yaml"))
        self.gpu = load_yaml(os.path.join(DEPLOY, "compose.gpu.yaml"))
        self.services = self.compose["services"]
        self.server = self.services["qmm-server"]

    def test_server_commands_serve(self):
        for name, command in (("compose.yaml", self.server["command"]),
                              ("compose.gpu.yaml", self.gpu["services"]["qmm-server"]["command"])):
            with self.subTest(file=name), Server(command) as server:
                self.assertEqual(server.health()[0], 0)

    def test_build_is_the_dockerfile_with_a_variant_it_knows(self):
        build = self.server["build"]
        self.assertEqual(os.path.realpath(os.path.join(DEPLOY, build["context"], build["dockerfile"])),
                         os.path.realpath(DOCKERFILE))
        self.assertEqual(build["args"]["QMM_CUDA"], "OFF")
        self.assertEqual(self.gpu["services"]["qmm-server"]["build"]["args"]["QMM_CUDA"], "ON")
        self.assertNotEqual(self.server["image"], self.gpu["services"]["qmm-server"]["image"])
        (device,) = self.gpu["services"]["qmm-server"]["deploy"]["resources"]["reservations"]["devices"]
        self.assertEqual(device["driver"], "nvidia")
        self.assertIn("gpu", device["capabilities"])

    def test_ports_are_published_on_loopback_only(self):
        for service in self.services.values():
            for mapping in service.get("ports", []):
                self.assertTrue(mapping.startswith("127.0.0.1:"), mapping)
        (grpc,) = self.server["ports"]
        self.assertEqual(int(grpc.rsplit(":", 1)[1]), port_of(flag(self.server["command"], "listen")))

    def test_stop_grace_outlasts_the_drain(self):
        self.assertGreater(seconds(self.server["stop_grace_period"]),
                           shutdown_grace(self.server["command"]))

    def test_prometheus_scrapes_the_server_and_loads_the_rules(self):
        (volume,) = self.services["prometheus"]["volumes"]
        host_dir, target, _ = volume.split(":")
        host_dir = os.path.join(DEPLOY, host_dir)
        config_path = flag(self.services["prometheus"]["command"], "config.file")
        config = load_yaml(os.path.join(host_dir, os.path.relpath(config_path, target)))
        for rules in config["rule_files"]:
            self.assertTrue(os.path.exists(os.path.join(host_dir, rules)), rules)
        targets = [t for job in config["scrape_configs"] for sc in job["static_configs"]
                   for t in sc["targets"]]
        metrics_port = port_of(flag(self.server["command"], "metrics_listen"))
        self.assertIn(f"qmm-server:{metrics_port}", targets)

    def test_grafana_provisions_the_dashboard_and_the_prometheus(self):
        mounts = dict(v.rsplit(":", 1)[0].split(":") for v in self.services["grafana"]["volumes"])
        provisioning = {t: os.path.join(DEPLOY, h) for h, t in mounts.items()}["/etc/grafana/provisioning"]
        dashboards = load_yaml(os.path.join(provisioning, "dashboards", "qmm.yml"))
        (provider,) = dashboards["providers"]
        dashboard_files = [t for h, t in mounts.items() if h.endswith(".json")]
        self.assertTrue(dashboard_files)
        for host, target in mounts.items():
            self.assertTrue(os.path.exists(os.path.join(DEPLOY, host)), host)
        for target in dashboard_files:
            self.assertEqual(os.path.dirname(target), provider["options"]["path"])
        (source,) = load_yaml(os.path.join(provisioning, "datasources", "prometheus.yml"))["datasources"]
        self.assertEqual(source["type"], "prometheus")
        self.assertEqual(source["url"], "http://prometheus:9090")
        self.assertIn("prometheus", self.services)


class KubernetesTest(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.join(DEPLOY, "kubernetes")
        self.kustomization = load_yaml(os.path.join(self.dir, "kustomization.yaml"))
        self.docs = {}
        for name in self.kustomization["resources"] + ["podmonitor.yaml"]:
            doc = load_yaml(os.path.join(self.dir, name))
            self.docs[doc["kind"]] = doc
        self.deployment = self.docs["Deployment"]
        self.pod = self.deployment["spec"]["template"]
        (self.container,) = self.pod["spec"]["containers"]
        self.args = self.container["args"]

    def test_every_document_is_named_and_versioned(self):
        for kind, doc in self.docs.items():
            self.assertIn("apiVersion", doc, kind)
            self.assertTrue(doc["metadata"]["name"], kind)

    def test_selectors_match_the_pod(self):
        labels = self.pod["metadata"]["labels"]
        selectors = [self.deployment["spec"]["selector"]["matchLabels"],
                     self.docs["Service"]["spec"]["selector"],
                     self.docs["PodMonitor"]["spec"]["selector"]["matchLabels"]]
        for selector in selectors:
            self.assertTrue(selector)
            self.assertLessEqual(selector.items(), labels.items())

    def test_ports_agree_with_the_flags(self):
        ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        self.assertEqual(ports["grpc"], port_of(flag(self.args, "listen")))
        self.assertEqual(ports["metrics"], port_of(flag(self.args, "metrics_listen")))
        for port in self.docs["Service"]["spec"]["ports"]:
            self.assertIn(port["targetPort"], ports)
        (endpoint,) = self.docs["PodMonitor"]["spec"]["podMetricsEndpoints"]
        self.assertEqual(endpoint["port"], "metrics")

    def test_args_serve_and_every_probe_passes(self):
        listen_port = port_of(flag(self.args, "listen"))
        self.assertTrue(flag(self.args, "listen").startswith("0.0.0.0:"), "probes use the pod IP")
        probes = {k: self.container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")}
        with Server(self.args) as server:
            for kind, probe in probes.items():
                with self.subTest(probe=kind):
                    # Kubernetes' gRPC probes take a numeric port only.
                    self.assertEqual(probe["grpc"]["port"], listen_port)
                    code, output = server.health(probe["grpc"].get("service", ""))
                    self.assertEqual(code, 0, output)
        self.assertEqual(probes["readinessProbe"]["grpc"]["service"], "qmm.v1.Qmm")

    def test_gpu_is_a_limit_only(self):
        resources = self.container["resources"]
        self.assertEqual(resources["limits"]["nvidia.com/gpu"], 1)
        self.assertNotIn("nvidia.com/gpu", resources.get("requests", {}))
        self.assertEqual(flag(self.args, "backend"), "cuda")

    def test_termination_grace_outlasts_the_pause_and_the_drain(self):
        command = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(command[0], "sleep")
        self.assertGreater(self.pod["spec"]["terminationGracePeriodSeconds"],
                           seconds(command[1]) + shutdown_grace(self.args))

    def test_runs_as_the_images_user_without_privileges(self):
        uid, gid = Dockerfile(DOCKERFILE).lines("runtime", "USER")[0].split(":")
        security = self.pod["spec"]["securityContext"]
        self.assertTrue(security["runAsNonRoot"])
        self.assertEqual(security["runAsUser"], int(uid))
        self.assertEqual(security["runAsGroup"], int(gid))
        container = self.container["securityContext"]
        self.assertFalse(container["allowPrivilegeEscalation"])
        self.assertTrue(container["readOnlyRootFilesystem"])
        self.assertEqual(container["capabilities"]["drop"], ["ALL"])

    def test_image_is_the_kustomization_s(self):
        (image,) = self.kustomization["images"]
        self.assertEqual(self.container["image"], image["name"])
        self.assertEqual(self.deployment["spec"]["strategy"]["type"], "Recreate")
        self.assertEqual(self.deployment["spec"]["replicas"], 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
