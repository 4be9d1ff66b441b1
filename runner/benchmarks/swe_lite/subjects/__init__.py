"""swe-lite's oracle subjects: stdlib only, run as a subject uid, import nothing of runner."""
