# Hugging Face tokenizers (engine/tokenizer/hf/) against Hugging Face's Rust library, its JS port
# and gpt-3-encoder: hf_oracle_test.sh installs them with npm ci into the build tree, runs
# hf_oracle.js once, then hf_oracle_tests compares.
add_executable(hf_oracle_tests ${CMAKE_CURRENT_LIST_DIR}/hf_oracle_test.cc)
target_link_libraries(hf_oracle_tests PRIVATE mixserve_engine GTest::gtest GTest::gtest_main)
target_compile_options(hf_oracle_tests PRIVATE ${MIXSERVE_WARNINGS})
add_test(NAME hf_tokenizer_oracles
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/hf_oracle_test.sh ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/build/tokenizer-oracles/hf
                 $<TARGET_FILE:hf_oracle_tests>)
set_tests_properties(hf_tokenizer_oracles PROPERTIES TIMEOUT 900 LABELS oracle)
