"""Self-play: generation, verification and meta-verification chains, their roles, bundles and scripted players."""
