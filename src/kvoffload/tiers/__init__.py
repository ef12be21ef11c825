"""Secondary tiers below the CPU tier: a sans-IO tiering manager (cascade on store, promotion on
lookup), declared tier lifecycles, a local file tier and a shared Redis tier, and their I/O driver.
"""
