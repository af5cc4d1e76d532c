//! Instruction decoding on the signal path (iced-x86): memory operands of an interrupted instruction.
