//! One qemu process and its monitor (QMP over a unix socket). The process
//! is killed when this is dropped, however the test that owns it ends.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::VmError;

/// The monitor answers at once; a wedged qemu must not hang a test.
const QMP_LIMIT: Duration = Duration::from_secs(10);
/// A qemu asked to quit gets this long before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Qemu {
    name: String,
    child: Option<Child>,
    qmp: PathBuf,
}

impl Qemu {
    /// Starts `qemu-system-x86_64 args…` with its standard error in
    /// `stderr_log`; its monitor listens on `qmp`.
    pub fn start(
        name: &str,
        args: &[String],
        qmp: &Path,
        stderr_log: &Path,
    ) -> Result<Self, VmError> {
        let log = std::fs::File::create(stderr_log).map_err(VmError::file(stderr_log))?;
        let child = Command::new("qemu-system-x86_64")
            .args(args)
            .arg("-qmp")
            .arg(format!("unix:{},server=on,wait=off", qmp.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|source| VmError::Start {
                vm: name.to_owned(),
                source,
            })?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            qmp: qmp.to_path_buf(),
        })
    }

    /// Whether the process has ended (and how), without waiting.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(err) => Some(err.to_string()),
        }
    }

    /// Runs one monitor command; its `return` value.
    pub fn command(&self, execute: &str, arguments: Value) -> Result<Value, VmError> {
        let failed = |what: String| VmError::Monitor {
            vm: self.name.clone(),
            what,
        };
        let stream = UnixStream::connect(&self.qmp)
            .map_err(|err| failed(format!("cannot connect to {}: {err}", self.qmp.display())))?;
        stream
            .set_read_timeout(Some(QMP_LIMIT))
            .and_then(|()| stream.set_write_timeout(Some(QMP_LIMIT)))
            .map_err(|err| failed(err.to_string()))?;
        let mut writer = stream.try_clone().map_err(|err| failed(err.to_string()))?;
        let mut reader = BufReader::new(stream);
        let deadline = Instant::now() + QMP_LIMIT;
        // The greeting, then capabilities negotiation, then the command.
        read_reply(&mut reader, deadline, true).map_err(&failed)?;
        let mut request = |request: Value| -> Result<Value, VmError> {
            writeln!(writer, "{request}").map_err(|err| failed(err.to_string()))?;
            let reply = read_reply(&mut reader, deadline, false).map_err(&failed)?;
            match reply.get("error") {
                Some(error) => Err(failed(format!("{}: {error}", request["execute"]))),
                None => Ok(reply.get("return").cloned().unwrap_or(Value::Null)),
            }
        };
        request(json!({"execute": "qmp_capabilities"}))?;
        request(json!({"execute": execute, "arguments": arguments}))
    }

    /// Stops the VM: `quit` through the monitor, then a kill if it lingers.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = self.command("quit", json!({}));
        let deadline = Instant::now() + QUIT_GRACE;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        // A dropped VM (a failed test) is killed at once, not asked.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The next line that is a reply (the greeting when `greeting`), skipping
/// asynchronous events.
fn read_reply(
    reader: &mut BufReader<UnixStream>,
    deadline: Instant,
    greeting: bool,
) -> Result<Value, String> {
    loop {
        if Instant::now() >= deadline {
            return Err("no answer in time".to_owned());
        }
        let mut line = String::new();
        let read = reader.read_line(&mut line).map_err(|err| err.to_string())?;
        if read == 0 {
            return Err("the monitor closed the connection".to_owned());
        }
        let value: Value =
            serde_json::from_str(&line).map_err(|err| format!("not JSON ({err}): {line}"))?;
        let wanted = if greeting {
            value.get("QMP").is_some()
        } else {
            value.get("return").is_some() || value.get("error").is_some()
        };
        if wanted {
            return Ok(value);
        }
    }
}
