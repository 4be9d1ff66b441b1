"""Signing (doing, with a private key): the runner's ed25519 key and what it signs.

Key handling lives here, above the evaluator, so the evaluator (whose digest every result is
bound to) never touches a private key; verifying is the evaluator's (runner/evaluator/trust/).
"""
