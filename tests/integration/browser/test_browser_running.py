"""A slow rerun in the browser: within about a second a banner says that work is running and what, and the previous
run's result (a red verdict) is no longer shown as if current (issue 37: the Mask lab ran 23-28 s a change under
stale, faded content, a faded red error once, with no sign of work)."""

from attnviz.app.running import BANNER_CLASS, SHOW_AFTER_S
from tests.integration.chromium import assert_no_exception
from tools.browser import choose_sidebar_option, set_sidebar_value, wait_until_idle

# the Mask lab's most, 128 tokens: a leak test of five SmolLM2 passes over them, seconds on the CI's two cores
TEXT = " ".join(["The cat sat on the mat because it was tired, and then it slept in the warm afternoon sun."] * 7)
LATE_S = SHOW_AFTER_S + 0.3  # the banner's second, and time for the browser to draw it

# Samples the page every 100 ms from the change until its run ends: the script's state, whether the banner is drawn
# and visible, and whether the old verdict (its exact text) is still visible anywhere.
WATCH = """async ([oldText, banner, maxMs]) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const start = performance.now(), samples = [];
  let seenRunning = false;
  while (performance.now() - start < maxMs) {
    const state = app.getAttribute('data-test-script-state');
    seenRunning ||= state === 'running';
    const b = document.querySelector('.' + banner);
    const shown = !!b && getComputedStyle(b).opacity === '1' && getComputedStyle(b).visibility === 'visible';
    const old = [...document.querySelectorAll('[data-testid="stAlert"]')].filter(e => e.innerText.trim() === oldText);
    samples.push({t: (performance.now() - start) / 1000, state, shown, text: b ? b.innerText : '',
                  old: old.some(e => getComputedStyle(e).visibility === 'visible')});
    if (seenRunning && state === 'notRunning') break;
    await new Promise(r => setTimeout(r, 100));
  }
  return samples;
}"""


def test_a_mask_lab_change_says_it_is_working_and_hides_the_old_verdict(server, page):
    from attnviz.models.hf.bundled import BUNDLED

    page.goto(f"{server}/masks")
    page.locator("h1").first.wait_for(state="visible")
    wait_until_idle(page)
    choose_sidebar_option(page, "Model", BUNDLED["smollm2"].title)
    set_sidebar_value(page, "Text to analyse", TEXT)
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Mask").first.click()
    page.keyboard.type("Prefix-LM")
    page.get_by_role("option", name="Prefix-LM", exact=True).click()
    wait_until_idle(page)
    page.get_by_text("the model's own mask", exact=True).click()  # a prefix read as causal: a future leak, in red
    wait_until_idle(page)
    verdict = page.locator('[data-testid="stAlert"]').filter(has_text="The leak test confirms it")
    old = verdict.first.inner_text().strip()

    box = page.get_by_label("prefix P", exact=True)
    box.fill("9")
    box.press("Enter")
    samples = page.evaluate(WATCH, [old, BANNER_CLASS, 240_000])

    start = next(s["t"] for s in samples if s["state"] == "running")  # the run began: the browser heard of it
    late = [s for s in samples if s["state"] == "running" and s["t"] - start >= LATE_S]
    assert late, f"the rerun took under {LATE_S} s: nothing to check ({samples[-1]})"
    assert all(s["shown"] for s in late), [s for s in late if not s["shown"]][:3]  # work is said to be running
    assert not [s for s in late if s["old"]], "the previous run's verdict was shown while the new one computed"
    assert any("Changing later tokens and rerunning the model" in s["text"] for s in late)  # and what runs
    wait_until_idle(page)
    assert_no_exception(page)
    assert page.locator(f".{BANNER_CLASS}").count() == 0  # gone with the run
    assert verdict.count() == 1 and verdict.first.inner_text().strip() != old  # the new verdict in its place
