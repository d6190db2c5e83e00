//! The `[alerting]` section: where alerts go and how often they are resent.

use std::collections::HashMap;

use super::super::error::Problem;
use super::super::{Config, parse_url};
use super::{RESEND_INTERVAL_RANGE, check_duration};

pub(super) fn check_alerting(c: &Config, p: &mut Vec<Problem>) {
    let a = &c.alerting;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, am) in a.alertmanagers.iter().enumerate() {
        let key = format!("alerting.alertmanagers[{i}]");
        let url = &am.url;
        match parse_url(url) {
            Ok(parsed) => {
                match seen.get(&parsed.normal_form()) {
                    Some(first) => p.push(
                        Problem::new(&key, format!("duplicate Alertmanager {url:?}"))
                            .with_first(format!("alerting.alertmanagers[{first}]")),
                    ),
                    None => {
                        seen.insert(parsed.normal_form(), i);
                    }
                }
                if am.ca_file.is_some() && !parsed.tls {
                    p.push(Problem::new(
                        format!("{key}.ca_file"),
                        format!("{url:?} is plain http; a CA file applies to https only"),
                    ));
                }
            }
            Err(e) => p.push(Problem::new(
                &key,
                format!(
                    "{url:?} is not a valid Alertmanager URL: {e}; write it like \"http://127.0.0.1:9093\" or \"https://am.example:9093\""
                ),
            )),
        }
        if am.basic_auth.is_some() && am.bearer_token_file.is_some() {
            p.push(Problem::new(
                &key,
                "basic_auth and bearer_token_file both set; Alertmanager takes one Authorization, choose one",
            ));
        }
        if let Some(auth) = &am.basic_auth
            && auth.username.is_empty()
        {
            p.push(Problem::new(
                format!("{key}.basic_auth.username"),
                "empty; name the user Alertmanager (or its proxy) expects",
            ));
        }
        let files = [
            ("ca_file", am.ca_file.as_ref()),
            (
                "basic_auth.password_file",
                am.basic_auth.as_ref().map(|b| &b.password_file),
            ),
            ("bearer_token_file", am.bearer_token_file.as_ref()),
        ];
        for (field, path) in files {
            if let Some(path) = path
                && !path.is_absolute()
            {
                p.push(Problem::new(
                    format!("{key}.{field}"),
                    format!(
                        "{} is relative; a service starts in /, so give the absolute path",
                        path.display()
                    ),
                ));
            }
        }
    }
    check_duration(
        p,
        "alerting.resend_interval",
        a.resend_interval,
        RESEND_INTERVAL_RANGE,
    );
}
