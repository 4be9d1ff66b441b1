"""Verifying signatures (judging): DSSE envelopes checked against the trusted public keys.

Nothing here holds or reads a private key; signing is done above the evaluator (runner/signing/).
A signature says which key vouched for which bytes; what it does and does not prove is in the
README's trust section.
"""
