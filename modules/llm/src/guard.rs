//! Prompt-injection guardrail: repository text goes into prompts as delimited data.
//!
//! A re-export of [`nuvira_api::llm::guard`], where the functions live so that stages without
//! the HTTP stack (inspect, verify) use the same convention: [`untrusted`] wraps text in
//! `<untrusted-data source="...">…</untrusted-data>` with any delimiter inside neutralised,
//! [`NOTICE`] / [`with_notice`] tell the model what those blocks are, and [`strip_fence`] takes
//! a JSON answer out of its Markdown fence.

pub use nuvira_api::llm::guard::{NOTICE, strip_fence, untrusted, with_notice};

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    proptest::proptest! {
        #[test]
        fn any_text_stays_inside_exactly_one_block(
            text in "(?s)([a-z \n]|<|/|\\s|untrusted-data|UNTRUSTED-DATA|>|\u{17F}){0,60}",
            source in "(?s).{0,20}",
        ) {
            let block = untrusted(&source, &text);
            let opens = Regex::new(r"(?i)<\s*untrusted-data").unwrap();
            let closes = Regex::new(r"(?i)<\s*/\s*untrusted-data").unwrap();
            proptest::prop_assert_eq!(opens.find_iter(&block).count(), 1);
            proptest::prop_assert_eq!(closes.find_iter(&block).count(), 1);
            proptest::prop_assert!(block.ends_with("</untrusted-data>"));
            // The source cannot break out of its attribute or add lines to the header.
            let header = Regex::new(r#"\A<untrusted-data source="[^"<>\r\n]*">\n"#).unwrap();
            proptest::prop_assert!(header.is_match(&block), "{}", block);
            // Nothing but the delimiters' `<` changes.
            let inner = &block[block.find('\n').unwrap() + 1..block.len() - "</untrusted-data>".len()];
            let restored = inner.replace("&lt;", "<");
            proptest::prop_assert_eq!(restored.trim_end_matches('\n'), text.trim_end_matches('\n'));
        }
    }
}
