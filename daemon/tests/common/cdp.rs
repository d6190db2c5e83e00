//! A small Chrome DevTools Protocol client for tests, over Chromium's own
//! `--remote-debugging-pipe`: JSON messages, each ended by a NUL byte,
//! written to the browser's file descriptor 3 and read from its 4. A shell
//! `exec` puts our pipes on those descriptors, so no unsafe code or extra
//! crate is needed to hand them over.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Every call, including page loads and screenshots, answers within this
/// or the test fails naming the call.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Names Debian and others give the browser, most suitable first.
const BROWSERS: &[&str] = &[
    "chromium-headless-shell",
    "chromium",
    "chromium-browser",
    "google-chrome",
];

/// The browser to drive: `MESHD_TEST_CHROMIUM` if set, else the first of
/// [`BROWSERS`] on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("MESHD_TEST_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    BROWSERS.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// A headless Chromium with a fresh profile, driven over its pipe.
#[derive(Debug)]
pub struct Browser {
    child: Child,
    to_browser: ChildStdin,
    from_browser: BufReader<ChildStdout>,
    next_id: u64,
    profile: tempfile::TempDir,
}

/// One page (a target) the browser has open.
#[derive(Debug, Clone)]
pub struct Page {
    session: String,
}

impl Browser {
    pub async fn launch(binary: &Path) -> anyhow::Result<Browser> {
        let profile = tempfile::tempdir().context("profile directory")?;
        let log =
            std::fs::File::create(profile.path().join("browser.log")).context("browser log")?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
            .arg(binary)
            .args([
                "--remote-debugging-pipe",
                "--headless",
                // The tests run as root in CI, where Chromium's sandbox
                // refuses to start; the browser only loads this test's own
                // page from loopback.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--mute-audio",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut child = child;
        let to_browser = child.stdin.take().context("browser pipe in")?;
        let from_browser = BufReader::new(child.stdout.take().context("browser pipe out")?);
        let mut browser = Browser {
            child,
            to_browser,
            from_browser,
            next_id: 0,
            profile,
        };
        let version = browser
            .call(None, "Browser.getVersion", json!({}))
            .await
            .with_context(|| format!("browser log:\n{}", browser.log_tail()))?;
        eprintln!(
            "browser: {}",
            version["product"].as_str().unwrap_or("unknown")
        );
        Ok(browser)
    }

    /// The end of the browser's own log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.profile.path().join("browser.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Sends one command (to a page when `page` is given) and waits for its
    /// answer, skipping the events that arrive meanwhile.
    pub async fn call(
        &mut self,
        page: Option<&Page>,
        method: &str,
        params: Value,
    ) -> anyhow::Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(page) = page {
            message["sessionId"] = Value::String(page.session.clone());
        }
        let exchange = async {
            let mut bytes = serde_json::to_vec(&message)?;
            bytes.push(0);
            self.to_browser.write_all(&bytes).await?;
            self.to_browser.flush().await?;
            let mut buffer = Vec::new();
            loop {
                buffer.clear();
                let read = self.from_browser.read_until(0, &mut buffer).await?;
                if read == 0 {
                    bail!("the browser closed its pipe");
                }
                if buffer.last() == Some(&0) {
                    buffer.pop();
                }
                let answer: Value = serde_json::from_slice(&buffer)
                    .with_context(|| format!("not JSON: {}", String::from_utf8_lossy(&buffer)))?;
                if answer["id"].as_u64() != Some(id) {
                    continue;
                }
                if let Some(error) = answer.get("error") {
                    bail!("{error}");
                }
                return Ok(answer["result"].clone());
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .with_context(|| format!("{method}: no answer within {CALL_TIMEOUT:?}"))?
            .with_context(|| format!("{method} failed"))
    }

    /// Opens `url` in a new page of `width` × `height` CSS pixels.
    pub async fn open(&mut self, url: &str, width: u32, height: u32) -> anyhow::Result<Page> {
        let target = self
            .call(None, "Target.createTarget", json!({ "url": "about:blank" }))
            .await?;
        let target_id = target["targetId"]
            .as_str()
            .context("no targetId")?
            .to_owned();
        let attached = self
            .call(
                None,
                "Target.attachToTarget",
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await?;
        let page = Page {
            session: attached["sessionId"]
                .as_str()
                .context("no sessionId")?
                .to_owned(),
        };
        self.call(
            Some(&page),
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )
        .await?;
        let navigated = self
            .call(Some(&page), "Page.navigate", json!({ "url": url }))
            .await?;
        if let Some(error) = navigated.get("errorText") {
            bail!("cannot load {url}: {error}");
        }
        // Navigation answers before the document exists; until it has
        // loaded, evaluations may fail as its context is replaced.
        let loaded = format!(
            "document.readyState === 'complete' && location.href === {}",
            Value::String(url.to_owned())
        );
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        loop {
            let last = self.eval(&page, &loaded).await;
            if matches!(last, Ok(Value::Bool(true))) {
                return Ok(page);
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{url} did not load within {CALL_TIMEOUT:?}: {last:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The value of a JavaScript expression in `page` (promises awaited).
    pub async fn eval(&mut self, page: &Page, expression: &str) -> anyhow::Result<Value> {
        let answer = self
            .call(
                Some(page),
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await?;
        if let Some(exception) = answer.get("exceptionDetails") {
            bail!("{expression}: {exception}");
        }
        Ok(answer["result"]["value"].clone())
    }

    /// Polls `expression` until it is `true`; `Ok(false)` after `within`.
    pub async fn wait_for(
        &mut self,
        page: &Page,
        expression: &str,
        within: Duration,
    ) -> anyhow::Result<bool> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.eval(page, expression).await? == Value::Bool(true) {
                return Ok(true);
            }
            if tokio::time::Instant::now() > deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Emulates `prefers-color-scheme: dark` (true) or light.
    pub async fn prefer_dark(&mut self, page: &Page, dark: bool) -> anyhow::Result<()> {
        let scheme = if dark { "dark" } else { "light" };
        self.call(
            Some(page),
            "Emulation.setEmulatedMedia",
            json!({ "features": [{ "name": "prefers-color-scheme", "value": scheme }] }),
        )
        .await
        .map(drop)
    }

    /// Presses and releases one key (e.g. "Tab") in `page`.
    pub async fn press(&mut self, page: &Page, key: &str, code: u32) -> anyhow::Result<()> {
        for kind in ["rawKeyDown", "keyUp"] {
            self.call(
                Some(page),
                "Input.dispatchKeyEvent",
                json!({ "type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code }),
            )
            .await?;
        }
        Ok(())
    }

    /// A PNG of what `page` shows.
    pub async fn screenshot(&mut self, page: &Page) -> anyhow::Result<Vec<u8>> {
        let shot = self
            .call(
                Some(page),
                "Page.captureScreenshot",
                json!({ "format": "png" }),
            )
            .await?;
        let data = shot["data"].as_str().context("no screenshot data")?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .context("screenshot is not base64")
    }

    /// Asks the browser to quit, and kills it if it does not.
    pub async fn close(mut self) {
        let _ = self.call(None, "Browser.close", json!({})).await;
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
