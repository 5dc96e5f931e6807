package daemon

import "github.com/hindsight-ai/hindsight/train"

// TrainConfig is the `train:` section; package train owns it.
type TrainConfig = train.Config

// CheckpointConfig is `train.checkpoint:`.
type CheckpointConfig = train.CheckpointConfig

// DefaultTrainConfig returns train.DefaultConfig().
func DefaultTrainConfig() TrainConfig { return train.DefaultConfig() }
