/*
 * import_cmd.h - `attnd import CHECKPOINT --layer I --name NAME --data-dir DIR`: layer I of a Hugging
 * Face checkpoint written into a data dir as an attnd layer (store/hf_import.h does the mapping).
 *
 * The layer is written as the daemon writes one (store/datadir.h: temp files, fsync, rename), so a
 * daemon serving DIR with --watch picks it up within its interval and one started later loads it.
 * On a terminal, stderr shows the reads as they go (tensors and bytes of the layer, the shard being
 * read); the command ends with one summary line on stdout (the layer's config, its parameter count,
 * what was read, and with --check the largest difference from the model's own output). --quiet, or
 * a stderr that is not a terminal, prints only the summary. Nothing is written when anything fails
 * (exit 1) or the arguments are wrong (exit 2).
 */
#ifndef ATTND_IMPORT_CMD_H
#define ATTND_IMPORT_CMD_H

/* The whole command: argv[0] is "import". Returns the process exit status. */
int srv_import_main(int argc, char **argv);

#endif
