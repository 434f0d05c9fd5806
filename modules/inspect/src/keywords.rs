//! Turning a goal into weighted keywords.
//!
//! The goal `"Rename parse_config to loadSettings in the CLI"` gives the identifiers
//! `parse_config` and `loadsettings` (weight [`IDENT_WEIGHT`]) and the words `parse`, `config`,
//! `load`, `settings`, `cli` (weight [`WORD_WEIGHT`]); `rename`, `to`, `in`, `the` are stop
//! words. Identifiers weigh more because a file that defines or names `parse_config` is far more
//! likely to matter than one that merely says "config".

/// Weight of a whole identifier (`parse_config`, `loadSettings`, `Type::method`).
pub const IDENT_WEIGHT: f64 = 2.0;
/// Weight of a plain word or of a part of an identifier.
pub const WORD_WEIGHT: f64 = 1.0;

/// One keyword, lowercase.
#[derive(Debug, Clone, PartialEq)]
pub struct Keyword {
    /// The text, lowercase.
    pub text: String,
    /// Its weight.
    pub weight: f64,
}

/// Words that say what to do rather than where: they would match almost every file.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "add",
    "adds",
    "after",
    "all",
    "also",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "before",
    "but",
    "by",
    "can",
    "change",
    "changes",
    "code",
    "could",
    "create",
    "do",
    "does",
    "each",
    "every",
    "file",
    "files",
    "fix",
    "fixes",
    "for",
    "from",
    "function",
    "get",
    "has",
    "have",
    "how",
    "if",
    "implement",
    "in",
    "into",
    "is",
    "it",
    "its",
    "make",
    "makes",
    "method",
    "more",
    "move",
    "must",
    "need",
    "new",
    "no",
    "not",
    "of",
    "on",
    "one",
    "or",
    "our",
    "please",
    "refactor",
    "remove",
    "rename",
    "replace",
    "should",
    "so",
    "some",
    "support",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "this",
    "to",
    "too",
    "update",
    "use",
    "uses",
    "using",
    "via",
    "was",
    "we",
    "were",
    "when",
    "where",
    "which",
    "while",
    "will",
    "with",
    "without",
    "would",
    "you",
    "your",
];

fn is_stop(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// Splits an identifier into its lowercase parts: `parse_config` → `parse`, `config`;
/// `loadHTTPSettings` → `load`, `http`, `settings`; `Type::method` → `type`, `method`.
pub fn split_identifier(ident: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for chunk in ident.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = chunk.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (prev, cur) = (chars[i - 1], chars[i]);
            let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            let boundary = (prev.is_lowercase() && cur.is_uppercase())
                || (prev.is_uppercase() && cur.is_uppercase() && next_lower)
                || (prev.is_alphabetic() && cur.is_ascii_digit())
                || (prev.is_ascii_digit() && cur.is_alphabetic());
            if boundary {
                parts.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        if start < chars.len() {
            parts.push(chars[start..].iter().collect::<String>().to_lowercase());
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

fn looks_like_identifier(token: &str) -> bool {
    let mut chars = token.chars();
    let first_lower = chars.next().is_some_and(char::is_lowercase);
    token.contains('_')
        || token.contains("::")
        || (first_lower && token.chars().any(char::is_uppercase))
        || token.chars().skip(1).any(char::is_uppercase) && token.chars().any(char::is_lowercase)
}

/// The keywords of a goal plus explicitly given keywords (which always count as identifiers).
///
/// Duplicates keep their highest weight; the result is ordered by weight, then text.
pub fn keywords(goal: &str, explicit: &[String]) -> Vec<Keyword> {
    let mut out: Vec<Keyword> = Vec::new();
    fn push(out: &mut Vec<Keyword>, text: String, weight: f64) {
        if let Some(k) = out.iter_mut().find(|k| k.text == text) {
            k.weight = k.weight.max(weight);
        } else {
            out.push(Keyword { text, weight });
        }
    }
    let tokens = goal
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .map(|t| t.trim_matches(':'))
        .filter(|t| !t.is_empty());
    let explicit = explicit.iter().map(|s| s.trim()).filter(|s| !s.is_empty());
    for (token, forced) in tokens
        .map(|t| (t, false))
        .chain(explicit.map(|t| (t, true)))
    {
        let parts = split_identifier(token);
        let ident = forced || (looks_like_identifier(token) && parts.len() > 1);
        if ident {
            let text = token.to_lowercase();
            if text.chars().count() >= 2 {
                push(&mut out, text, IDENT_WEIGHT);
            }
        }
        for part in parts {
            if part.chars().count() >= 3
                && !is_stop(&part)
                && !part.chars().all(|c| c.is_ascii_digit())
            {
                push(&mut out, part, WORD_WEIGHT);
            }
        }
    }
    if out.is_empty() {
        // A goal made only of words that usually say what to do ("add", "fix the function")
        // still means something: those words are all there is to search for.
        for token in goal.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            for part in split_identifier(token) {
                if part.chars().count() >= 3 && !part.chars().all(|c| c.is_ascii_digit()) {
                    push(&mut out, part, WORD_WEIGHT);
                }
            }
        }
    }
    out.sort_by(|a, b| {
        b.weight
            .total_cmp(&a.weight)
            .then_with(|| a.text.cmp(&b.text))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_goal_of_stop_words_only_searches_for_them_rather_than_nothing() {
        let got: Vec<String> = keywords("add", &[]).into_iter().map(|k| k.text).collect();
        assert_eq!(got, ["add"]);
        let got: Vec<String> = keywords("fix the function", &[])
            .into_iter()
            .map(|k| k.text)
            .collect();
        assert_eq!(got, ["fix", "function", "the"]);
        // With any real keyword, the stop words stay out.
        let got: Vec<String> = keywords("add retries", &[])
            .into_iter()
            .map(|k| k.text)
            .collect();
        assert_eq!(got, ["retries"]);
    }

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        let mut sorted = STOP_WORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOP_WORDS);
    }

    #[test]
    fn identifiers_are_kept_whole_and_split() {
        let k = keywords("Rename parse_config to loadHTTPSettings in the CLI", &[]);
        let texts: Vec<&str> = k.iter().map(|k| k.text.as_str()).collect();
        assert_eq!(&texts[..2], ["loadhttpsettings", "parse_config"]);
        for w in ["parse", "config", "load", "http", "settings", "cli"] {
            assert!(texts.contains(&w), "{w} missing from {texts:?}");
        }
        for w in ["rename", "to", "in", "the"] {
            assert!(!texts.contains(&w), "stop word {w} kept: {texts:?}");
        }
    }

    #[test]
    fn explicit_keywords_count_as_identifiers() {
        let k = keywords("", &["Scheduler".into()]);
        assert_eq!(
            k[0],
            Keyword {
                text: "scheduler".into(),
                weight: IDENT_WEIGHT
            }
        );
    }

    #[test]
    fn method_paths_split_on_colons() {
        assert_eq!(
            split_identifier("Engine::run_plan"),
            ["engine", "run", "plan"]
        );
        assert_eq!(
            split_identifier("parseV2Config"),
            ["parse", "v", "2", "config"]
        );
    }
}
