#[test]
fn many_rounds_of_two_hundred_threads() {
    for _ in 0..5 {
        assert_eq!(thread_crate::crowd(200), 200 * 199 / 2);
    }
}

#[test]
#[ignore = "slow"]
fn a_thousand_threads() {
    assert_eq!(thread_crate::crowd(1000), 1000 * 999 / 2);
}
