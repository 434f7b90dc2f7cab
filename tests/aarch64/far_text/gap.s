// 136 MiB of text between near.c and far.c (zeros: udf), so that calls between them, and
// from Rivet's new text to the near side, are beyond +-128 MiB.
	.text
	.skip 0x8800000
