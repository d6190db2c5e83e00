//! The host end of a VM's command channel (guest/agent.sh): a unix
//! socket that qemu joins to the guest's second serial port.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::VmError;

/// How long one read of the socket may block before the deadline is
/// checked again.
const READ_SLICE: Duration = Duration::from_millis(200);

/// What a command printed (standard output and error together) and its
/// exit code (124 when the guest's `timeout` ended it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub code: i32,
    pub text: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == 0
    }
}

#[derive(Debug)]
pub struct Agent {
    vm: String,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Agent {
    /// Connects to the socket at `path`, retrying until qemu has made it
    /// or `deadline` passes.
    pub fn connect(vm: &str, path: &Path, deadline: Instant) -> Result<Self, VmError> {
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(stream) => break stream,
                Err(err) if Instant::now() >= deadline => {
                    return Err(VmError::Agent {
                        vm: vm.to_owned(),
                        what: format!("cannot connect to {}: {err}", path.display()),
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        stream
            .set_read_timeout(Some(READ_SLICE))
            .map_err(|err| VmError::Agent {
                vm: vm.to_owned(),
                what: err.to_string(),
            })?;
        let writer = stream.try_clone().map_err(|err| VmError::Agent {
            vm: vm.to_owned(),
            what: err.to_string(),
        })?;
        Ok(Self {
            vm: vm.to_owned(),
            reader: BufReader::new(stream),
            writer,
            next_id: 1,
        })
    }

    /// Waits until the guest answers a command: it has booted and its
    /// init has set up the modules and NICs.
    pub fn wait_ready(&mut self, deadline: Instant) -> Result<(), VmError> {
        loop {
            let attempt = Instant::now() + Duration::from_secs(2);
            match self.exec_until("true", 2, attempt.min(deadline)) {
                Ok(_) => return Ok(()),
                Err(VmError::AgentTimeout { .. }) if Instant::now() < deadline => {}
                Err(VmError::AgentTimeout { .. }) => {
                    return Err(VmError::Agent {
                        vm: self.vm.clone(),
                        what: "did not come up (see its console log)".to_owned(),
                    });
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Runs `script` with `sh` in the guest; the guest kills it after
    /// `limit`, and the host gives up a few seconds after that.
    pub fn exec(&mut self, script: &str, limit: Duration) -> Result<Output, VmError> {
        let seconds = limit.as_secs().max(1);
        let deadline = Instant::now() + limit + Duration::from_secs(10);
        self.exec_until(script, seconds, deadline)
    }

    fn exec_until(
        &mut self,
        script: &str,
        seconds: u64,
        deadline: Instant,
    ) -> Result<Output, VmError> {
        let id = self.next_id;
        self.next_id += 1;
        let line = format!("{id} {seconds} {}\n", STANDARD.encode(script));
        self.writer
            .write_all(line.as_bytes())
            .map_err(|err| VmError::Agent {
                vm: self.vm.clone(),
                what: format!("cannot send a command: {err}"),
            })?;
        let mut buffer = Vec::new();
        loop {
            if Instant::now() >= deadline {
                return Err(VmError::AgentTimeout {
                    vm: self.vm.clone(),
                    script: script.to_owned(),
                });
            }
            match self.reader.read_until(b'\n', &mut buffer) {
                Ok(0) => {
                    return Err(VmError::Agent {
                        vm: self.vm.clone(),
                        what: "the command channel closed (did the VM stop?)".to_owned(),
                    });
                }
                Ok(_) if buffer.ends_with(b"\n") => {
                    let text = String::from_utf8_lossy(&buffer).into_owned();
                    buffer.clear();
                    if let Some(output) = parse_answer(&text, id) {
                        return Ok(output);
                    }
                }
                Ok(_) => {}
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(err) => {
                    return Err(VmError::Agent {
                        vm: self.vm.clone(),
                        what: err.to_string(),
                    });
                }
            }
        }
    }
}

/// The answer to command `id` in one line of the channel; other lines
/// (answers to abandoned commands, the guest's boot noise) are skipped.
fn parse_answer(line: &str, id: u64) -> Option<Output> {
    let mut fields = line.trim_end().splitn(4, ' ');
    if fields.next()? != "meshvm-done" || fields.next()?.parse::<u64>().ok()? != id {
        return None;
    }
    let code = fields.next()?.parse().ok()?;
    let text = STANDARD.decode(fields.next().unwrap_or("")).ok()?;
    Some(Output {
        code,
        text: String::from_utf8_lossy(&text).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_matched_by_id() {
        let line = format!("meshvm-done 7 3 {}\n", STANDARD.encode("out\nerr\n"));
        assert_eq!(
            parse_answer(&line, 7),
            Some(Output {
                code: 3,
                text: "out\nerr\n".into()
            })
        );
        assert_eq!(parse_answer(&line, 6), None);
        assert_eq!(
            parse_answer("meshvm-done 8 0\n", 8),
            Some(Output {
                code: 0,
                text: String::new()
            }),
            "no output"
        );
        assert_eq!(parse_answer("[   1.2] rdma_rxe: loaded\n", 7), None);
        assert_eq!(parse_answer("meshvm-done 7 x AAAA\n", 7), None);
    }
}
