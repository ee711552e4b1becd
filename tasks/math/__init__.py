"""Math answer tasks: GSM8K, MATH and plain rows, answered on the final channel, checked with math-verify."""
