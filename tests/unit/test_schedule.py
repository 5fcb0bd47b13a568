"""tests/schedule.py: which tests share a worker, and the order groups are handed out in."""

from tests.schedule import group_of, order


def test_an_integration_module_is_one_group_and_a_shared_folder_is_one_group():
    assert group_of("tests/integration/cli/test_cli.py::test_version") == "integration/cli/test_cli.py"
    assert group_of("tests/integration/cli/test_cli.py::test_heads[a-b]") == "integration/cli/test_cli.py"
    assert group_of("tests/integration/zoo/test_zoo.py::test_z[llama]") == "integration/zoo"
    assert group_of("tests/integration/zoo/test_zoo_logits.py::test_l[gpt2]") == "integration/zoo"
    # the browser modules each a group (each worker its own server): no one of them the whole run's critical path
    assert group_of("tests/integration/browser/test_browser.py::test_x") == "integration/browser/test_browser.py"
    assert group_of("tests/integration/browser/test_browser_grid.py::test_y") == (
        "integration/browser/test_browser_grid.py"
    )
    assert group_of("tests/unit/test_cli.py::test_a") == "unit/test_cli.py::test_a"  # elsewhere, one test each


def test_the_longest_group_goes_first_and_keeps_its_own_order():
    ids = [
        "tests/unit/test_a.py::test_1",  # 0: unknown, one test: 1 s
        "tests/integration/cli/test_b.py::test_1",  # 1: known, 50 s
        "tests/integration/pages/test_c.py::test_1",  # 2: unknown, three tests: 3 s
        "tests/integration/cli/test_b.py::test_2",  # 3
        "tests/integration/pages/test_c.py::test_2",  # 4
        "tests/integration/pages/test_c.py::test_3",  # 5
        "tests/unit/test_d.py::test_1",  # 6: known, 2 s
    ]
    durations = {"integration/cli/test_b.py": 50.0, "unit/test_d.py::test_1": 2.0}
    assert order(ids, durations) == [1, 3, 2, 4, 5, 6, 0]
    assert order(ids, {}) == [2, 4, 5, 1, 3, 0, 6]  # nothing known: by number of tests, ties as collected
