"""Many TLC runs in one JVM: :class:`TlcSession` checks model after model without paying the JVM's
start-up (~1 s here) for each.

Each run gets TLC in a class loader of its own, so no static state (TLC keeps plenty: globals,
the interned-string table, the output streams) carries from one model to the next; what is shared
is the JVM and its compiled JDK code. The driver is a small Java class kept here as source and
compiled once with ``javac`` into ``~/.cache/tlacheck/tlc-batch/``. It reads one run per line
(the directory, then TLC's arguments, tab-separated), runs ``tlc2.TLC`` as its ``main`` would
(the spec's folder as the module resolver) and prints TLC's output, then a line with the exit
status. Without ``javac`` each run falls back to :func:`tlacheck.tlc.run_tlc`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from tlacheck.result import CheckResult

from . import tlc

_END = "@@tlacheck-tlc-batch-end "
# A fresh JVM after this many runs: unloaded class loaders still cost the JVM some memory.
RUNS_PER_JVM = 200

DRIVER_SOURCE = r"""
import java.io.*;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;

public final class TlcBatch {
    public static void main(String[] argv) throws Exception {
        URL[] urls = new URL[argv.length];
        for (int i = 0; i < argv.length; i++) urls[i] = new File(argv[i]).toURI().toURL();
        PrintStream realOut = System.out;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            String[] parts = line.split("\t");
            String[] args = new String[parts.length - 1];
            System.arraycopy(parts, 1, args, 0, args.length);
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(captured, true, StandardCharsets.UTF_8);
            System.setOut(capture);
            System.setErr(capture);
            int status;
            try (URLClassLoader loader = new URLClassLoader(urls, ClassLoader.getPlatformClassLoader())) {
                Thread.currentThread().setContextClassLoader(loader);
                loader.loadClass("util.ToolIO").getMethod("setUserDir", String.class).invoke(null, parts[0]);
                Class<?> tlcClass = loader.loadClass("tlc2.TLC");
                Object tlc = tlcClass.getConstructor().newInstance();
                if ((Boolean) tlcClass.getMethod("handleParameters", String[].class).invoke(tlc, (Object) args)) {
                    String mainFile = (String) tlcClass.getMethod("getMainFile").invoke(tlc);
                    String folder = new File(parts[0], mainFile).getAbsoluteFile().getParent();
                    Object resolver = loader.loadClass("util.SimpleFilenameToStream")
                        .getConstructor(String.class).newInstance(folder);
                    tlcClass.getMethod("setResolver", loader.loadClass("util.FilenameToStream")).invoke(tlc, resolver);
                    int code = (Integer) tlcClass.getMethod("process").invoke(tlc);
                    status = (Integer) loader.loadClass("tlc2.output.EC$ExitStatus")
                        .getMethod("errorConstantToExitStatus", int.class).invoke(null, code);
                } else {
                    status = 1;
                }
            } catch (Throwable error) {
                error.printStackTrace(capture);
                status = 255;
            }
            capture.flush();
            System.setOut(realOut);
            realOut.write(captured.toByteArray());
            realOut.print("\n@@tlacheck-tlc-batch-end " + status + "\n");
            realOut.flush();
        }
    }
}
"""


def _driver_dir() -> Path | None:
    """The folder holding the compiled driver (compiled now if needed), or None without javac."""
    javac = shutil.which("javac")
    if javac is None:
        return None
    digest = hashlib.sha256(DRIVER_SOURCE.encode()).hexdigest()[:16]
    folder = Path.home() / ".cache" / "tlacheck" / "tlc-batch" / digest
    if (folder / "TlcBatch.class").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as build:
        source = Path(build) / "TlcBatch.java"
        source.write_text(DRIVER_SOURCE)
        completed = subprocess.run([javac, "-d", build, str(source)], capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            return None
        # Renamed into place so a concurrent session never loads a half-written class.
        os.replace(Path(build) / "TlcBatch.class", folder / "TlcBatch.class")
    return folder


class TlcSession:
    """A JVM that runs TLC on model after model (``with TlcSession(jar) as session: ...``).

    :meth:`check` gives the same :class:`CheckResult` as :func:`tlacheck.tlc.run_tlc`. Runs
    are one at a time; the session is not shared between threads.
    """

    def __init__(self, jar: str | os.PathLike[str] | None = None, options: tlc.TlcOptions | None = None) -> None:
        self.java, self.jar = tlc.find_tlc(jar)
        self.options = tlc.TlcOptions.from_env() if options is None else options
        self.driver = _driver_dir()
        self._process: subprocess.Popen[str] | None = None
        self._runs = 0

    def __enter__(self) -> TlcSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the JVM (it ends when its input closes)."""
        if self._process is not None:
            stdin = self._process.stdin
            if stdin is not None:
                stdin.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def _start(self) -> subprocess.Popen[str]:
        library = os.pathsep.join(str(p) for p in self.options.library_paths)
        command = [
            self.java,
            # Short runs: the client compiler and the serial collector start fastest.
            "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss4m",
            *self.options.jvm_options,
            *([f"-DTLA-Library={library}"] if library else []),
            "-cp", str(self.driver),
            "TlcBatch", str(self.jar), *(str(p) for p in self.options.class_path),
        ]  # fmt: skip
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, encoding="utf-8")

    def check(self, spec: Path, config: Path, *, check_deadlock: bool = True) -> CheckResult:
        """Model-check ``spec`` with ``config`` (TLC, one worker)."""
        if self.driver is None:
            return tlc.run_tlc(spec, config, jar=self.jar, java=self.java, check_deadlock=check_deadlock,
                               options=self.options)
        spec, config = spec.resolve(), config.resolve()
        if self._process is None or self._runs >= RUNS_PER_JVM:
            self.close()
            self._process = self._start()
            self._runs = 0
        self._runs += 1
        with tempfile.TemporaryDirectory(prefix="tlacheck-tlc-") as tmp:
            trace_file = Path(tmp) / "trace.json"
            arguments = tlc.build_command("java", self.jar, spec, config, trace_file, metadir=Path(tmp) / "states",
                                          check_deadlock=check_deadlock)
            arguments = arguments[arguments.index("tlc2.TLC") + 1:]
            arguments[-1] = str(spec)
            process = self._process
            if process.stdin is None or process.stdout is None:
                raise tlc.TlcNotFound("the TLC session's JVM has no pipes")
            started = time.perf_counter()
            process.stdin.write("\t".join([str(spec.parent), *arguments]) + "\n")
            process.stdin.flush()
            lines = []
            status = None
            for line in process.stdout:
                if line.startswith(_END):
                    status = int(line[len(_END):])
                    break
                lines.append(line)
            seconds = time.perf_counter() - started
            if status is None:
                self._process = None
                raise tlc.TlcNotFound("the TLC session's JVM ended: " + "".join(lines[-5:]).strip())
            trace_json = trace_file.read_text() if trace_file.is_file() else None
        result = tlc.parse_tlc_output("".join(lines), status, trace_json=trace_json,
                                      properties=tlc.config_properties(config),
                                      invariants=tlc.config_invariants(config))
        result.seconds = seconds
        result.spec = str(spec)
        result.config = str(config)
        return result
