# `venv_marker` exists only in the project's .venv (the test that runs this project writes it
# there): these tests import only when the project's own interpreter runs them.
import venv_marker

import shapes


def test_area():
    assert shapes.area(2, 3) == 6


def test_runs_in_the_project_venv():
    assert venv_marker.WHERE == "project venv"


def test_area_fails_on_purpose():
    assert shapes.area(2, 2) == 5
