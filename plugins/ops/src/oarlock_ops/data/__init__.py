"""oarlock.io: datasets, samplers and the DataLoader (placeholder until filled in)."""


def register_api(api):
    pass
