package progcache

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProgramParams reads a main function's inputs as go-xla writes them, and
// refuses what a warming execution could not be given.
func TestProgramParams(t *testing.T) {
	code := []byte("module @step attributes {stablehlo.num_replicas = 1} {\n" +
		"  func.func @main(%arg0: tensor<3xf32>, %arg1: tensor<f32>, %w: tensor<576x1536xbf16>, %mask: tensor<8x256xi1>, %ids: tensor<8x256xi32>) -> (tensor<3xf32>, tensor<f32>) {\n" +
		"    %0 = stablehlo.add %arg0, %arg0 : tensor<3xf32>\n")
	ps, ok := programParams(code)
	require.True(t, ok)
	require.Equal(t, []param{
		{Type: "f32", Dims: []int64{3}}, {Type: "f32"}, {Type: "bf16", Dims: []int64{576, 1536}},
		{Type: "i1", Dims: []int64{8, 256}}, {Type: "i32", Dims: []int64{8, 256}},
	}, ps)
	require.Equal(t, int64(576*1536*2), ps[2].bytes())
	require.Equal(t, int64(4), ps[1].bytes())
	require.Equal(t, "bf16x576x1536", ps[2].key())
	require.Equal(t, "f32", ps[1].key())

	ps, ok = programParams([]byte("module @m {\n  func.func public @main() -> tensor<f32> {\n"))
	require.True(t, ok, "no inputs")
	require.Empty(t, ps)

	for name, code := range map[string]string{
		"no main":   "module @m {\n  func.func @other(%a: tensor<f32>) -> tensor<f32> {\n",
		"sharded":   `func.func @main(%arg0: tensor<16x128xf32> { sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]> }) -> tensor<16x128xf32> {`,
		"complex":   "func.func @main(%arg0: tensor<4xcomplex<f32>>) -> tensor<4xf32> {",
		"dynamic":   "func.func @main(%arg0: tensor<?x4xf32>) -> tensor<4xf32> {",
		"token":     "func.func @main(%arg0: !stablehlo.token) -> tensor<f32> {",
		"unknown":   "func.func @main(%arg0: tensor<4xf8E4M3FN>) -> tensor<4xf32> {",
		"unclosed":  "func.func @main(%arg0: tensor<4xf32>",
		"bytecode":  "ML\xefR\x00\x01\x02",
		"truncated": "",
	} {
		_, ok := programParams([]byte(code))
		require.False(t, ok, name)
	}
}
