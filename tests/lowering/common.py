"""Sizes and expected parameter lists shared by the lowering tests."""


H, V = 32, 50
TOL = 1e-4

LSTM_PARAMS = ['word', 'children', 'level_offsets', 'roots', 'max_level_size',
               'emb', 'W', 'bW', 'U', 'bU', 'h', 'c', 'out']
FC_PARAMS = ['word', 'children', 'level_offsets', 'roots', 'max_level_size', 'emb', 'W', 'b', 'h', 'out']
# without leaf specialization every node tests num_children, so it is a parameter (after children)
LSTM_PLAIN_PARAMS = LSTM_PARAMS[:2] + ['num_children'] + LSTM_PARAMS[2:]
FC_PLAIN_PARAMS = FC_PARAMS[:2] + ['num_children'] + FC_PARAMS[2:]
