// Package creditfile reads and writes credit output files
// (`<output_dir>/<claimed>.credit.arrow`, Arrow IPC file format): one Row per trained
// rollout of one input file, holding what the trainer saw and the per-token credit it
// applied, for audit, for the credit viewer and for other trainers.
//
// In the data flow (docs/design.md) it is the trainer's last output: the ledger
// publishes a file's rows once every accepted rollout of it is trained (Publish:
// temp file, fsync, rename, fsync dir), and the viewer and `hindsight inspect` read
// them back with Read, which accepts schema versions 1, 2 and 3.
package creditfile
