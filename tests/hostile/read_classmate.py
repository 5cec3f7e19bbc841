def _attack():
    with open("$course/submitted/ada/02_ddp_basics/02_ddp_basics.ipynb") as f:
        text = f.read()
    i = text.index("totals[0] +=")  # her train_one_epoch
    return text[i - 300:i + 300]
