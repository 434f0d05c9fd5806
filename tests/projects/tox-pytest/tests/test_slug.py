import pytest

import slug


def test_slugify():
    assert slug.slugify("Hello World") == "hello-world"


@pytest.mark.skip(reason="not yet")
def test_unicode():
    assert slug.slugify("Ä") == "a"


def test_slugify_fails_on_purpose():
    assert slug.slugify("A  B") == "a--b"
