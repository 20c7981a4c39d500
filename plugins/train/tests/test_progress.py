"""The progress bar: plain lines every log_every steps when stderr is not a terminal."""

import io

from oarlock_train.progress import ProgressBar


def test_plain_lines_show_step_loss_and_tokens_per_second():
    out = io.StringIO()
    bar = ProgressBar(total=4, stream=out, log_every=2)
    for step in range(1, 5):
        bar.update(step, 2.5, tokens=100)
    bar.message("evaluated")
    bar.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" [")[0] for line in lines[:3]] == ["step 1/4", "step 2/4", "step 4/4"]
    assert "loss 2.5000" in lines[0] and "tok/s" in lines[0]
    assert lines[-1] == "evaluated"
