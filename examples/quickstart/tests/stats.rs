use quickstart::{average, maximum};

#[test]
fn average_of_one_number_is_that_number() {
    assert_eq!(average(&[4.0]), Some(4.0));
}

#[test]
fn maximum_of_nothing_is_none() {
    assert_eq!(maximum(&[]), None);
}
