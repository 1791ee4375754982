//! A JSON object signed in place: its serialisation `B` with a `mac` member spliced in first,
//!
//! ```text
//! {"mac":"<64 lowercase hex digits>",<B without its opening brace>
//! ```
//!
//! where the MAC is HMAC-SHA256 over exactly the bytes of `B`. A reader takes the text apart
//! by bytes and recomputes the MAC; it never parses the JSON and prints it again, which need
//! not reproduce a float's digits. The text stays one JSON object whose extra `mac` member
//! readers of the object ignore. Record lines (`records`) and `run.json` (`manifest`) are
//! signed so, each with a key of its own derived from the run's secret.

use anyhow::Result;

use super::seed::RunSecret;

pub(crate) const MAC_PREFIX: &str = "{\"mac\":\"";
pub(crate) const MAC_HEX_LEN: usize = 64;

/// `body` (a JSON object's serialisation, compact or pretty) signed with `key`.
pub(crate) fn sign_object(key: &RunSecret, body: &str) -> Result<String> {
    let Some(members) = body.strip_prefix('{').filter(|m| m.trim().len() > 1) else {
        anyhow::bail!("signing {body}: not a JSON object with members");
    };
    let mac = key.mac_hex(body.as_bytes());
    Ok(format!("{MAC_PREFIX}{mac}\",{members}"))
}

/// The MAC a signed text claims and the bytes it must cover.
pub(crate) enum Claim<'a> {
    /// The text does not begin with a `mac` member.
    None,
    /// It begins with one that is not 64 characters followed by `",`.
    Malformed,
    Mac {
        hex: &'a str,
        body: String,
    },
}

impl Claim<'_> {
    /// Whether the claim holds under `key` (a text without a MAC never does).
    pub(crate) fn verifies(&self, key: &RunSecret) -> bool {
        match self {
            Claim::Mac { hex, body } => key.verify_mac(body.as_bytes(), hex),
            _ => false,
        }
    }
}

pub(crate) fn claim(text: &str) -> Claim<'_> {
    let Some(rest) = text.strip_prefix(MAC_PREFIX) else {
        return Claim::None;
    };
    let Some(hex) = rest.get(..MAC_HEX_LEN) else {
        return Claim::Malformed;
    };
    match rest[MAC_HEX_LEN..].strip_prefix("\",") {
        Some(members) => Claim::Mac {
            hex,
            body: format!("{{{members}"),
        },
        None => Claim::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_object_verifies_only_as_written_and_under_its_key() {
        let key = RunSecret::from_bytes([3; 32]);
        let body = "{\n  \"a\": 1,\n  \"b\": [2, 3]\n}";
        let signed = sign_object(&key, body).unwrap();
        assert!(signed.starts_with("{\"mac\":\""));
        let v: serde_json::Value = serde_json::from_str(&signed).unwrap();
        assert_eq!(v["b"][1], 3);
        assert!(claim(&signed).verifies(&key));
        assert!(!claim(&signed).verifies(&key.subkey("other")));
        assert!(!claim(&signed.replace("2, 3", "2, 4")).verifies(&key));
        assert!(!claim(body).verifies(&key));
        assert!(matches!(
            claim("{\"mac\":\"00\",\"a\":1}"),
            Claim::Malformed
        ));
        assert!(sign_object(&key, "{}").is_err());
    }
}
