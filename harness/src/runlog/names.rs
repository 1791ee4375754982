//! File names in the run folder.

/// `s` as a file name: ASCII letters, digits, `-` and `.` kept, anything else `_`.
pub(crate) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
