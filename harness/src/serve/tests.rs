//! The API's description against its routes, and the tokens file's errors.

use std::collections::BTreeSet;

use super::api::{OPENAPI, ROUTES};

#[test]
fn the_openapi_description_lists_exactly_the_routes_served() {
    let spec: serde_json::Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
    assert_eq!(spec["openapi"].as_str().map(|v| &v[..2]), Some("3."));
    let mut described = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for method in item.as_object().unwrap().keys() {
            described.insert((method.to_uppercase(), path.clone()));
        }
    }
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(described, served, "openapi.json and api::ROUTES differ");
    // Every reference resolves to a component.
    let text = OPENAPI;
    for (at, _) in text.match_indices("\"$ref\": \"#/components/") {
        let rest = &text[at + "\"$ref\": \"#/components/".len()..];
        let name = &rest[..rest.find('"').unwrap()];
        let (kind, item) = name.split_once('/').unwrap();
        assert!(
            !spec["components"][kind][item].is_null(),
            "unresolved $ref #/components/{name}"
        );
    }
}

#[test]
fn a_tokens_file_is_refused_with_what_is_wrong_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("tokens.toml");
    let check = |text: &str, want: &str| {
        std::fs::write(&f, text).unwrap();
        let e = match super::auth::Clients::load(&f) {
            Ok(_) => panic!("{text} was taken"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(want) && e.contains("tokens.toml"), "{e}");
    };
    let h = "a".repeat(64);
    check("", "no [[client]]");
    check(
        "[[client]]\nname = \"a\"\ntoken_sha256 = \"xyz\"\n",
        "64 hex digits",
    );
    check(
        &format!("[[client]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\nquota = 3\n"),
        "unknown field",
    );
    check(
        &format!("[[client]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\n[[client]]\nname = \"b\"\ntoken_sha256 = \"{h}\"\n"),
        "same token",
    );
    let (token, entry) = super::auth::new_token("zoe").unwrap();
    std::fs::write(&f, entry).unwrap();
    let c = super::auth::Clients::load(&f).unwrap();
    assert_eq!(
        c.find(Some(&format!("Bearer {token}")))
            .map(|c| c.name.as_str()),
        Some("zoe")
    );
    assert!(c.find(Some(&format!("Bearer {token}x"))).is_none());
    assert!(c.find(Some(&token)).is_none());
    assert!(c.find(None).is_none());
}
