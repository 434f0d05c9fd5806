//! Symbol extraction on real code: this repository's own Rust and real TypeScript, Python and
//! JavaScript files (see fixtures/README.md).

use nuvira_inspect::lang::{language_of, outline};

fn names(o: &nuvira_inspect::lang::Outline) -> Vec<(String, String)> {
    o.symbols
        .iter()
        .map(|s| (s.name.clone(), s.kind.clone()))
        .collect()
}

#[test]
fn rust_symbols_of_this_crate_include_functions_types_and_methods() {
    let src = include_str!("../src/lib.rs");
    let o = outline("rust", src);
    let n = names(&o);
    for want in [
        ("inspect", "function"),
        ("InspectOptions", "struct"),
        ("InspectError", "enum"),
        ("Default for InspectOptions", "impl"),
        ("InspectOptions::default", "method"),
        ("Hooks::none", "method"),
    ] {
        assert!(
            n.iter().any(|(a, b)| a == want.0 && b == want.1),
            "{want:?} missing from {n:?}"
        );
    }
    // Lines are 1-based and point at the definition.
    let f = o.symbols.iter().find(|s| s.name == "inspect").unwrap();
    let line = src.lines().nth(f.line as usize - 1).unwrap();
    assert!(line.starts_with("pub fn inspect("), "{line}");
    assert!(
        o.imports.iter().any(|i| i.starts_with("std::path::")),
        "{:?}",
        o.imports
    );
}

#[test]
fn typescript_symbols_of_a_real_library_file() {
    let src = include_str!("fixtures/mutationCache.ts");
    let o = outline(language_of("mutationCache.ts").unwrap(), src);
    let n = names(&o);
    for want in [
        ("MutationCacheConfig", "interface"),
        ("MutationCacheNotifyEvent", "type"),
        ("MutationCache", "class"),
        ("MutationCache::add", "method"),
        ("MutationCache::resumePausedMutations", "method"),
        ("scopeFor", "function"),
    ] {
        assert!(
            n.iter().any(|(a, b)| a == want.0 && b == want.1),
            "{want:?} missing from {n:?}"
        );
    }
    let class = o
        .symbols
        .iter()
        .find(|s| s.name == "MutationCache")
        .unwrap();
    assert_eq!(class.line, 123);
    assert_eq!(
        &o.imports[..3],
        ["./mutation", "./notifyManager", "./subscribable"]
    );
}

#[test]
fn python_symbols_of_the_standard_library_json_decoder() {
    let src = include_str!("../../syntax/tests/fixtures/py_json_decoder.py");
    let language = language_of("json/decoder.py").unwrap();
    assert_eq!(language, "python");
    let o = outline(language, src);
    let n = names(&o);
    for want in [
        ("JSONDecodeError", "class"),
        ("JSONDecodeError::__init__", "method"),
        ("py_scanstring", "function"),
        ("JSONDecoder", "class"),
        ("JSONDecoder::raw_decode", "method"),
    ] {
        assert!(
            n.iter().any(|(a, b)| a == want.0 && b == want.1),
            "{want:?} missing from {n:?}"
        );
    }
    // A method is never listed as a bare function.
    assert!(!n.iter().any(|(a, _)| a == "decode"), "{n:?}");
    let class = o.symbols.iter().find(|s| s.name == "JSONDecoder").unwrap();
    assert!(
        src.lines()
            .nth(class.line as usize - 1)
            .unwrap()
            .starts_with("class JSONDecoder(")
    );
    // `import re`, `from json import scanner`; the imports inside `try:` are not top-level.
    assert_eq!(o.imports, ["re", "json"]);
}

#[test]
fn javascript_symbols_of_a_real_library_file() {
    let src = include_str!("../../syntax/tests/fixtures/js_zod_v4_core_checks.js");
    let language = language_of("v4/core/checks.js").unwrap();
    assert_eq!(language, "javascript");
    let o = outline(language, src);
    let f = o
        .symbols
        .iter()
        .find(|s| s.name == "handleCheckPropertyResult")
        .unwrap_or_else(|| panic!("no handleCheckPropertyResult in {:?}", names(&o)));
    assert_eq!((f.kind.as_str(), f.line), ("function", 524));
    // The commented-out import is not one.
    assert_eq!(o.imports, ["./core.js", "./regexes.js", "./util.js"]);
}
